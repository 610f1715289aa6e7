//! `edi-inbox inspect` driven as a user runs it.

use std::fs;

use std::path::Path;

use crate::common::{edi_inbox, inspect_json, samples};
use predicates::prelude::*;

#[test]
fn json_has_the_documented_fields() {
    let lines = inspect_json(&[&samples().join("valid/invoic-d96a-unoc-crlf.edi")])
        .code(0)
        .json();
    assert_eq!(lines.len(), 1);
    let i = &lines[0];
    assert!(
        i["file"]
            .as_str()
            .unwrap()
            .ends_with("invoic-d96a-unoc-crlf.edi")
    );
    assert_eq!(i["sender"], "5412345000013");
    assert_eq!(i["sender_qualifier"], "14");
    assert_eq!(i["recipient"], "4012345000023");
    assert_eq!(i["recipient_qualifier"], "14");
    assert_eq!(i["control_ref"], "INV0001");
    assert_eq!(i["syntax"], "UNOC:3");
    assert_eq!(i["groups"], 0);
    assert_eq!(i["test"], false);
    assert_eq!(i["date"], "240315");
    assert_eq!(i["time"], "1030");
    let sha = i["sha256"].as_str().unwrap();
    assert!(sha.len() == 64 && sha.bytes().all(|b| b.is_ascii_hexdigit()));
    let m = &i["messages"][0];
    assert_eq!(m["ref"], "1");
    assert_eq!(m["type"], "INVOIC");
    assert_eq!(m["version"], "D");
    assert_eq!(m["release"], "96A");
    assert_eq!(m["agency"], "UN");
    assert_eq!(m["segments"], 15);
}

#[test]
fn groups_and_test_indicator_show_in_json() {
    let lines = inspect_json(&[&samples().join("valid/desadv-d07a-groups-v4.edi")]).json();
    let i = &lines[0];
    assert_eq!(i["groups"], 2);
    assert_eq!(i["test"], true);
    assert_eq!(i["syntax"], "UNOY:4");
    assert_eq!(i["messages"][2]["group"], "G2");
}

#[test]
fn human_output_names_the_envelope() {
    edi_inbox()
        .arg("inspect")
        .arg(samples().join("valid/orders-d01b-no-una.edi"))
        .assert()
        .code(0)
        .stdout(
            predicate::str::contains("interchange ORD'0042")
                .and(predicate::str::contains("SENDER+ONE (qualifier ZZ)"))
                .and(predicate::str::contains("UNOA:2"))
                .and(predicate::str::contains("ORDERS D:01B:UN  10 segments"))
                .and(predicate::str::contains("sha256"))
                .and(predicate::str::contains(
                    "1 file, 1 interchange, 1 message; 0 files rejected",
                )),
        );
}

#[test]
fn a_rejection_names_file_byte_and_reason() {
    let file = samples().join("broken/unt-count-wrong.edi");
    edi_inbox()
        .arg("inspect")
        .arg(&file)
        .assert()
        .code(3)
        .stderr(predicate::str::contains(format!(
            "{}: rejected: UNT at byte 118 (segment 5) counts 5 segments; the message has 4",
            file.display()
        )));
}

#[test]
fn a_missing_path_is_reported_and_the_rest_still_read() {
    let lines = inspect_json(&[
        Path::new("no/such/file.edi"),
        &samples().join("valid/invrpt-level-b.edi"),
    ])
    .code(3)
    .json();
    assert_eq!(lines[0]["file"], "no/such/file.edi");
    assert_eq!(lines[0]["error"], "does not exist");
    assert_eq!(lines[1]["control_ref"], "LB0001");
}

#[test]
fn usage_errors_exit_2() {
    edi_inbox().arg("inspect").assert().code(2);
    edi_inbox()
        .args(["inspect", "--bogus", "x"])
        .assert()
        .code(2);
    edi_inbox().arg("frobnicate").assert().code(2);
    edi_inbox().assert().code(2);
}

#[test]
fn folders_are_walked_in_name_order_skipping_hidden_and_partial_files() {
    let dir = tempfile::tempdir().unwrap();
    let valid = fs::read(samples().join("valid/orders-d01b-no-una.edi")).unwrap();
    fs::create_dir_all(dir.path().join("b/nested")).unwrap();
    fs::create_dir_all(dir.path().join(".hidden")).unwrap();
    for name in [
        "z.edi",
        "a.edi",
        "b/nested/c.edi",
        ".hidden/x.edi",
        ".dot.edi",
        "up.tmp",
        "up.part",
        "up.partial",
    ] {
        fs::write(dir.path().join(name), &valid).unwrap();
    }
    #[cfg(unix)]
    std::os::unix::fs::symlink(dir.path().join("a.edi"), dir.path().join("link.edi")).unwrap();
    let lines = inspect_json(&[dir.path()]).code(0).json();
    let files: Vec<String> = lines
        .iter()
        .map(|l| {
            let f = l["file"].as_str().unwrap();
            f.strip_prefix(dir.path().to_str().unwrap())
                .unwrap()
                .trim_start_matches('/')
                .to_string()
        })
        .collect();
    assert_eq!(files, ["a.edi", "b/nested/c.edi", "z.edi"]);
}

#[test]
fn a_file_named_on_the_command_line_is_read_whatever_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(".upload.part");
    fs::copy(samples().join("valid/orders-d01b-no-una.edi"), &path).unwrap();
    edi_inbox().arg("inspect").arg(&path).assert().code(0);
}

#[cfg(unix)]
#[test]
fn non_utf8_file_names_are_shown_not_fatal() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let name = std::ffi::OsStr::from_bytes(b"inv\xff.edi");
    fs::copy(
        samples().join("valid/orders-d01b-no-una.edi"),
        dir.path().join(name),
    )
    .unwrap();
    let lines = inspect_json(&[dir.path()]).code(0).json();
    assert!(lines[0]["file"].as_str().unwrap().ends_with("inv\\xFF.edi"));
}
