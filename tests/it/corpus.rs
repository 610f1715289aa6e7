//! Conformance over real files nobody here wrote: `../shared/corpus` (see its MANIFEST.tsv).
//!
//! `inspect` must accept every file whose envelope verdict is `valid`, with the manifest's
//! interchange and message counts and the UNB fields of INTERCHANGES.tsv, and reject every other
//! file. The corpus lives outside the repository: set `EDI_INBOX_CORPUS` to its folder (`.ci/run`
//! always does, to `../shared/corpus` beside the checkout, so that CI fails where the corpus is
//! missing); without it the test looks beside the checkout and, on a machine that has none, says
//! so and passes.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::common::{RunExt, edi_inbox, json_lines};

pub fn corpus() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("EDI_INBOX_CORPUS") {
        let dir = PathBuf::from(dir);
        assert!(
            dir.join("real/MANIFEST.tsv").is_file(),
            "EDI_INBOX_CORPUS={} has no real/MANIFEST.tsv: the shared corpus of real files is \
             missing there, and the conformance tests over it (corpus.rs, contrl.rs) cannot run",
            dir.display()
        );
        return Some(dir);
    }
    let beside = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/corpus");
    beside.join("real/MANIFEST.tsv").is_file().then_some(beside)
}

/// Rows of a TSV file as maps from column name to value.
pub fn tsv(path: PathBuf) -> Vec<BTreeMap<String, String>> {
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split('\t').collect();
    lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            header
                .iter()
                .zip(l.split('\t'))
                .map(|(h, v)| (h.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

/// The envelope verdict of a `notes` column, after any `broken[...]` tag.
pub fn verdict(notes: &str) -> &str {
    let notes = match notes.strip_prefix("broken[") {
        Some(rest) => rest.split_once("] ").map_or(rest, |(_, v)| v),
        None => notes,
    };
    notes.split([';', '(', '[']).next().unwrap_or("").trim()
}

#[test]
fn inspect_agrees_with_the_manifest() {
    let Some(root) = corpus() else {
        eprintln!("no corpus beside the checkout and EDI_INBOX_CORPUS unset: nothing to check");
        return;
    };
    let manifest = tsv(root.join("real/MANIFEST.tsv"));
    let expected_interchanges = tsv(root.join("real/INTERCHANGES.tsv"));
    assert!(
        manifest.len() > 100,
        "the manifest lists {} files",
        manifest.len()
    );

    let mut cmd = edi_inbox();
    cmd.args(["inspect", "--json"]);
    for row in &manifest {
        cmd.arg(root.join(&row["file"]));
    }
    // Some of the real files are rejected on purpose (status 3); anything else is a failure.
    let out = cmd.run();
    out.code_in(&[0, 3]);
    let mut by_file: BTreeMap<String, Vec<serde_json::Value>> = BTreeMap::new();
    for line in json_lines(&out.stdout) {
        let file = line["file"].as_str().unwrap().to_string();
        by_file.entry(file).or_default().push(line);
    }

    let mut failures = Vec::new();
    let (mut valid, mut rejected) = (0, 0);
    for row in &manifest {
        let path = root.join(&row["file"]).to_string_lossy().into_owned();
        let lines = by_file.get(&path).cloned().unwrap_or_default();
        let errors: Vec<_> = lines.iter().filter(|l| l.get("error").is_some()).collect();
        let ok: Vec<_> = lines.iter().filter(|l| l.get("error").is_none()).collect();
        if verdict(&row["notes"]) == "valid" {
            valid += 1;
            let messages: usize = ok
                .iter()
                .map(|l| l["messages"].as_array().unwrap().len())
                .sum();
            let want = (
                row["n_interchanges"].parse::<usize>().unwrap(),
                row["n_messages"].parse::<usize>().unwrap(),
            );
            if !errors.is_empty() || (ok.len(), messages) != want {
                failures.push(format!(
                    "{}: valid in the manifest with {want:?} interchanges/messages; inspect read {:?} and said {:?}",
                    row["file"],
                    (ok.len(), messages),
                    errors.first().map(|e| e["error"].to_string())
                ));
                continue;
            }
            let expected: Vec<_> = expected_interchanges
                .iter()
                .filter(|i| i["file"] == row["file"])
                .collect();
            for (got, want) in ok.iter().zip(&expected) {
                for (field, column) in [
                    ("sender", "sender_0004"),
                    ("recipient", "recipient_0010"),
                    ("control_ref", "icref_0020"),
                    ("syntax", "syntax_0001_0002"),
                ] {
                    if got[field].as_str() != Some(want[column].as_str()) {
                        failures.push(format!(
                            "{}: {field} is {} where INTERCHANGES.tsv has {:?}",
                            row["file"], got[field], want[column]
                        ));
                    }
                }
            }
        } else {
            rejected += 1;
            if errors.is_empty() {
                failures.push(format!(
                    "{}: the manifest says {:?}; inspect accepted it",
                    row["file"],
                    verdict(&row["notes"])
                ));
            }
            for e in errors {
                let msg = e["error"].as_str().unwrap_or("");
                if !msg.contains("byte ") && e["kind"] != "io" {
                    failures.push(format!("{}: error names no byte: {msg}", row["file"]));
                }
            }
        }
    }
    eprintln!("corpus: {valid} valid files accepted, {rejected} others rejected");
    assert!(
        failures.is_empty(),
        "{} disagreements:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
