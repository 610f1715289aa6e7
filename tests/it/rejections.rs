//! A rejection a person can read (issue 40, item 2): the text at its offset, the segment with
//! a marker under the byte, in the outcome line (human and JSON) and the quarantine's note.

use std::fs;

use crate::common::RunExt;

per_backend! {
    fn a_rejection_quotes_its_segment_with_a_marker_under_the_byte(site) {
        site.put_sample("broken/unt-count-wrong.edi", "a.edi");
        site.put_sample("broken/truncated-no-unz.edi", "b.edi");
        let run = site
            .cmd()
            .args(["ingest", "--quarantine"])
            .arg(site.path("failed"))
            .arg(site.drop())
            .run();
        run.code(3);
        let out = run.out();
        let lines: Vec<&str> = out.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.contains("a.edi") && l.contains("counts"))
            .unwrap_or_else(|| panic!("no rejection of a.edi\n{run}"));
        // The segment under the line, and the marker under its first byte (the offset).
        assert!(lines[at + 1].trim_start().starts_with("UNT+"), "{run}");
        let column = |l: &str| l.len() - l.trim_start().len();
        assert_eq!(lines[at + 2].trim(), "^", "{run}");
        assert_eq!(column(lines[at + 2]), column(lines[at + 1]), "{run}");
        // A file cut short: its last segment, the marker just past it.
        let at = lines
            .iter()
            .position(|l| l.contains("b.edi") && l.contains("ends before"))
            .unwrap_or_else(|| panic!("no rejection of b.edi\n{run}"));
        assert_eq!(
            column(lines[at + 2]),
            column(lines[at + 1]) + lines[at + 1].trim().len(),
            "the marker stands after the last segment\n{run}"
        );
        // The quarantine's note says the same.
        let note = fs::read_to_string(site.path("failed").join("a.edi.error.txt")).unwrap();
        assert!(note.lines().nth(1).is_some_and(|l| l.trim_start().starts_with("UNT+")), "{note}");
        assert!(note.lines().nth(2).is_some_and(|l| l.trim() == "^"), "{note}");

        // show: under the rejection, the same text from the bytes kept.
        let show = site.run(&["show", "BROKENSENDER", "RECIPIENT", "B0001"]);
        show.code(0);
        let shown = show.out();
        let lines: Vec<&str> = shown.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.starts_with("rejected     in ") && l.contains("counts 5 segments"))
            .unwrap_or_else(|| panic!("show names no rejection\n{show}"));
        assert_eq!(lines[at + 1].trim(), "UNT+5+1'", "{show}");
        assert_eq!(lines[at + 2].trim(), "^", "{show}");
        assert_eq!(column(lines[at + 2]), column(lines[at + 1]), "{show}");

        // list: under the rejected file's line, the same text, from the 1,000 bytes kept around
        // the byte; and in its JSON.
        let list = site.run(&["list", "--status", "rejected", "--file", "a.edi"]);
        list.code(0);
        let listed = list.out();
        let lines: Vec<&str> = listed.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.contains("a.edi") && l.contains("counts 5 segments"))
            .unwrap_or_else(|| panic!("list names no rejection of a.edi\n{list}"));
        assert_eq!(lines[at + 1].trim(), "UNT+5+1'", "{list}");
        assert_eq!(lines[at + 2].trim(), "^", "{list}");
        let json = site.list(&["--status", "rejected", "--file", "a.edi"]);
        assert_eq!(json[0]["quote"]["text"], "UNT+5+1'", "{json:?}");

        // JSON: the quote's text and the column of the byte in it.
        site.put_sample("broken/unt-count-wrong.edi", "c.edi");
        let lines = site.ingest_json(&[]).code(3).json();
        let rejected = lines
            .iter()
            .find(|l| l["status"] == "rejected" && l["file"].as_str().is_some_and(|f| f.ends_with("c.edi")))
            .unwrap_or_else(|| panic!("{lines:?}"));
        let text = rejected["quote"]["text"].as_str().unwrap();
        assert!(text.starts_with("UNT+"), "{rejected}");
        assert_eq!(rejected["quote"]["column"], 0, "{rejected}");
    }
}
