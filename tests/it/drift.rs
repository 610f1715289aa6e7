//! A drift a person can read (issue 40, item 2): `show --diff` sets each drifted copy beside the
//! applied one, segment by segment, the changed segments marked; `show --raw --copy N` prints
//! the copy that was not applied. On both backends.

use std::fs;

per_backend! {
    /// The NAD of the issue: `Hauptstra?+e` applied, `Nebenstra?+e` sent again under the same
    /// key; and a second drift of the BGM.
    fn show_diff_marks_the_changed_segments_of_each_drifted_copy(site) {
        let applied = fs::read(crate::common::samples().join("valid/invoic-d96a-unoc-crlf.edi"))
            .unwrap();
        let text = |b: &[u8]| b.iter().map(|&c| c as char).collect::<String>();
        let back = |s: &str| s.chars().map(|c| c as u8).collect::<Vec<u8>>();
        let drifted = back(&text(&applied).replacen("Hauptstra?+e 1", "Nebenstra?+e 1", 1));
        let drifted_again = back(&text(&applied).replacen("BGM+380+INV00002", "BGM+381+INV00002", 1));
        site.put("a.edi", &applied);
        site.ingest_json(&[]).code(0);
        site.put("b.edi", &drifted);
        site.ingest_json(&[]).code(3);
        fs::remove_file(site.drop().join("b.edi")).unwrap();
        site.put("c.edi", &drifted_again);
        site.ingest_json(&[]).code(3);

        let key = ["5412345000013", "4012345000023", "INV0001"];
        let show = |extra: &[&str]| {
            let mut args = vec!["show"];
            args.extend(key);
            args.extend(extra);
            site.run(&args)
        };
        let run = show(&["--diff"]);
        run.code(0);
        let out = run.out();
        assert!(out.contains("drifted copy 1 of 2") && out.contains("drifted copy 2 of 2"), "{run}");
        // The changed NAD, both sides, marked and numbered; the Latin-1 text read as UNOC says.
        assert!(
            out.contains("  -    6 NAD+SU+5412345000013::9++Müller GmbH+Hauptstra?+e 1+Köln++50667+DE'"),
            "{run}"
        );
        assert!(
            out.contains("  +    6 NAD+SU+5412345000013::9++Müller GmbH+Nebenstra?+e 1+Köln++50667+DE'"),
            "{run}"
        );
        assert!(out.contains("  -   18 BGM+380+INV00002+9'") && out.contains("  +   18 BGM+381+INV00002+9'"), "{run}");
        // Unchanged segments around a change are context, unmarked.
        assert!(out.contains("       5 RFF+ON:PO-4711'"), "{run}");
        assert!(!out.contains("-    5 RFF"), "{run}");

        let json = show(&["--diff", "--json"]);
        json.code(0);
        let copies = json.json();
        assert_eq!(copies.len(), 2, "{json}");
        assert_eq!(copies[0]["changed_segments"], 1, "{json}");
        let marked: Vec<_> = copies[0]["lines"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l["mark"] != " " && l["mark"] != "...")
            .map(|l| (l["mark"].as_str().unwrap().to_string(), l["segment_number"].as_i64().unwrap()))
            .collect();
        assert_eq!(marked, [("-".to_string(), 6), ("+".to_string(), 6)], "{json}");

        // The copies that were not applied, byte for byte (the interchange, UNA to UNZ, without
        // the file's last line break).
        let raw = show(&["--raw", "--copy", "1"]);
        raw.code(0);
        assert!(raw.stdout == drifted.trim_ascii_end(), "--copy 1 is not the drifted copy\n{raw}");
        let raw = show(&["--raw", "--copy", "2"]);
        assert!(raw.stdout == drifted_again.trim_ascii_end(), "--copy 2 is not the second drifted copy\n{raw}");
        let none = show(&["--raw", "--copy", "3"]);
        none.code(3);
        assert!(none.err().contains("2 drifted copies are kept"), "{none}");
        // A key without drift says so.
        site.put("o.edi", &fs::read(crate::common::samples().join("valid/orders-d01b-no-una.edi")).unwrap());
        site.ingest_json(&[]);
        let plain = site.run(&["show", "SENDER+ONE", "RECEIVER", "ORD'0042", "--diff"]);
        plain.code(3);
        assert!(plain.err().contains("no drifted copy"), "{plain}");
    }
}
