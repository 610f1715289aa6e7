//! Every file in samples/ is read by `inspect`, with the outcome samples/README.md promises.

use std::collections::BTreeSet;

use crate::common::RunExt;
use crate::common::{edi_inbox, json_lines, samples};

/// What `inspect --json` prints for a sample.
enum Expect {
    /// Interchanges with these control references and message counts, nothing rejected.
    Valid(&'static [(&'static str, usize)]),
    /// Rejected with this error kind at this byte, after these interchanges were read.
    Rejected {
        before: usize,
        kind: &'static str,
        offset: u64,
    },
}

use Expect::*;

const SAMPLES: &[(&str, Expect)] = &[
    ("valid/invoic-d96a-unoc-crlf.edi", Valid(&[("INV0001", 2)])),
    ("valid/orders-d01b-no-una.edi", Valid(&[("ORD'0042", 1)])),
    ("valid/desadv-d07a-groups-v4.edi", Valid(&[("DES0007", 3)])),
    ("valid/two-interchanges.edi", Valid(&[("A1", 1), ("A2", 1)])),
    ("valid/iftsta-wrapped-80-bom.edi", Valid(&[("WRAP01", 1)])),
    ("valid/invrpt-level-b.edi", Valid(&[("LB0001", 1)])),
    // ANSI X12 (issue 41), and a file of both standards.
    (
        "x12/850-purchase-order-00401.x12",
        Valid(&[("000001001", 1)]),
    ),
    (
        "x12/810-856-00501-wrapped-80-bom.x12",
        Valid(&[("000002002", 3)]),
    ),
    (
        "x12/mixed-edifact-then-x12.edi",
        Valid(&[("MIX0001", 1), ("000003003", 1)]),
    ),
    (
        "x12/broken-se-count-wrong.x12",
        Rejected {
            before: 0,
            kind: "se-count",
            offset: 236,
        },
    ),
    (
        "x12/broken-isa06-short.x12",
        Rejected {
            before: 0,
            kind: "isa-width",
            offset: 0,
        },
    ),
    (
        "x12/broken-good-then-iea-reference.x12",
        Rejected {
            before: 1,
            kind: "iea-reference",
            offset: 467,
        },
    ),
    (
        "broken/binary-garbage.bin",
        Rejected {
            before: 0,
            kind: "trailing-data",
            offset: 0,
        },
    ),
    (
        "broken/blank-sender.edi",
        Rejected {
            before: 0,
            kind: "missing-element",
            offset: 0,
        },
    ),
    (
        "broken/dangling-release.edi",
        Rejected {
            before: 0,
            kind: "dangling-release",
            offset: 138,
        },
    ),
    (
        "broken/duplicate-message-ref.edi",
        Rejected {
            before: 0,
            kind: "duplicate-message-ref",
            offset: 107,
        },
    ),
    (
        "broken/empty-control-ref.edi",
        Rejected {
            before: 0,
            kind: "missing-element",
            offset: 0,
        },
    ),
    (
        "broken/empty.edi",
        Rejected {
            before: 0,
            kind: "empty",
            offset: 0,
        },
    ),
    (
        "broken/good-then-bad.edi",
        Rejected {
            before: 1,
            kind: "unz-count",
            offset: 267,
        },
    ),
    (
        "broken/message-only.edi",
        Rejected {
            before: 0,
            kind: "no-interchange",
            offset: 0,
        },
    ),
    (
        "broken/no-messages.edi",
        Rejected {
            before: 0,
            kind: "lower-level-empty",
            offset: 59,
        },
    ),
    (
        "broken/segment-outside-message.edi",
        Rejected {
            before: 0,
            kind: "outside-message",
            offset: 59,
        },
    ),
    (
        "broken/short-una.edi",
        Rejected {
            before: 0,
            kind: "truncated-una",
            offset: 0,
        },
    ),
    (
        "broken/syntax-version-0.edi",
        Rejected {
            before: 0,
            kind: "unsupported-syntax-version",
            offset: 10,
        },
    ),
    (
        "broken/truncated-no-unz.edi",
        Rejected {
            before: 0,
            kind: "missing-unz",
            offset: 127,
        },
    ),
    (
        "broken/une-count-wrong.edi",
        Rejected {
            before: 0,
            kind: "une-count",
            offset: 214,
        },
    ),
    (
        "broken/unt-count-wrong.edi",
        Rejected {
            before: 0,
            kind: "unt-count",
            offset: 118,
        },
    ),
    (
        "broken/unt-count-wrong-in-group.edi",
        Rejected {
            before: 0,
            kind: "unt-count",
            offset: 191,
        },
    ),
    (
        "broken/unt-reference-mismatch.edi",
        Rejected {
            before: 0,
            kind: "unt-reference",
            offset: 118,
        },
    ),
    (
        "broken/unz-count-wrong.edi",
        Rejected {
            before: 0,
            kind: "unz-count",
            offset: 127,
        },
    ),
    (
        "broken/unz-reference-mismatch.edi",
        Rejected {
            before: 0,
            kind: "unz-reference",
            offset: 127,
        },
    ),
];

#[test]
fn every_sample_is_listed_here() {
    let mut on_disk = BTreeSet::new();
    for entry in walkdir::WalkDir::new(samples()) {
        let entry = entry.unwrap();
        if entry.file_type().is_file() && entry.file_name() != "README.md" {
            let rel = entry.path().strip_prefix(samples()).unwrap();
            on_disk.insert(rel.to_string_lossy().replace('\\', "/"));
        }
    }
    let listed: BTreeSet<String> = SAMPLES.iter().map(|(f, _)| f.to_string()).collect();
    assert_eq!(on_disk, listed, "samples/ and this table differ");
    let readme = std::fs::read_to_string(samples().join("README.md")).unwrap();
    for f in &listed {
        assert!(
            readme.contains(f.as_str()),
            "samples/README.md does not describe {f}"
        );
    }
}

#[test]
fn each_sample_gives_its_outcome() {
    for (file, expect) in SAMPLES {
        let out = edi_inbox()
            .arg("inspect")
            .arg("--json")
            .arg(samples().join(file))
            .run();
        let lines = json_lines(&out.stdout);
        match expect {
            Valid(want) => {
                out.code(0);
                let got: Vec<(String, usize)> = lines
                    .iter()
                    .map(|l| {
                        (
                            l["control_ref"].as_str().unwrap().to_string(),
                            l["messages"].as_array().unwrap().len(),
                        )
                    })
                    .collect();
                let want: Vec<(String, usize)> =
                    want.iter().map(|(r, n)| (r.to_string(), *n)).collect();
                assert_eq!(got, want, "{file}");
                for l in &lines {
                    assert_eq!(l["sha256"].as_str().unwrap().len(), 64, "{file}");
                }
            }
            Rejected {
                before,
                kind,
                offset,
            } => {
                out.code(3);
                assert_eq!(lines.len(), before + 1, "{file}: {lines:?}");
                let e = &lines[*before];
                assert_eq!(e["kind"], *kind, "{file}: {e}");
                assert_eq!(e["offset"], *offset, "{file}: {e}");
                let msg = e["error"].as_str().unwrap();
                assert!(msg.contains(&format!("byte {offset}")), "{file}: {msg}");
            }
        }
    }
}

#[test]
fn the_whole_samples_folder_exits_3_and_reports_every_broken_file() {
    let out = edi_inbox()
        .arg("inspect")
        .arg(samples().join("valid"))
        .arg(samples().join("broken"))
        .arg(samples().join("x12"))
        .run();
    out.code(3);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let broken = SAMPLES
        .iter()
        .filter(|(_, e)| matches!(e, Rejected { .. }))
        .count();
    assert_eq!(stderr.matches("rejected:").count(), broken, "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("{} files rejected", broken)),
        "{stdout}"
    );
}
