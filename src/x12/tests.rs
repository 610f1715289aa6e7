//! One test per envelope rule, each naming the byte the error is at.

use super::*;

/// An ISA with the widths X12.5 fixes, `*` `:` `~` as its delimiters.
fn isa(sender: &str, receiver: &str, control: &str, version: &str, isa11: &str) -> String {
    format!(
        "ISA*00*{:10}*00*{:10}*ZZ*{sender:15}*ZZ*{receiver:15}*260101*1200*{isa11}*{version}*{control}*0*P*:~",
        "", ""
    )
}

/// An interchange of one group with one 850, control numbers given.
fn one(control: &str) -> String {
    format!(
        "{}GS*PO*APPSEND*APPRECV*20260101*1200*7*X*004010~ST*850*0001~BEG*00*SA*PO1**20260101~SE*3*0001~GE*1*7~IEA*1*{control}~",
        isa("SENDER", "RECEIVER", control, "00401", "U")
    )
}

fn read(data: &str) -> Vec<Result<Interchange<'_>, X12Error>> {
    interchanges(data.as_bytes()).collect()
}

fn only_error(data: &str) -> X12Error {
    let items = read(data);
    match items.iter().find_map(|i| i.as_ref().err()) {
        Some(e) => e.clone(),
        None => panic!("expected an error in {data:?}, read {items:?}"),
    }
}

#[test]
fn a_valid_interchange_gives_its_key_groups_and_sets() {
    let text = one("000000001");
    let items = read(&text);
    assert_eq!(items.len(), 1);
    let i = items[0].as_ref().expect("valid");
    assert_eq!(i.isa.sender, "SENDER", "ISA06 trailing spaces trimmed");
    assert_eq!(i.isa.receiver, "RECEIVER");
    assert_eq!(
        (
            i.isa.sender_qualifier.as_str(),
            i.isa.receiver_qualifier.as_str()
        ),
        ("ZZ", "ZZ")
    );
    assert_eq!(i.isa.control_number, "000000001");
    assert_eq!(i.isa.version, "00401");
    assert_eq!(
        i.separators.repetition, None,
        "no repetition separator before 00402"
    );
    assert_eq!(
        (
            i.separators.element,
            i.separators.component,
            i.separators.terminator
        ),
        (b'*', b':', b'~')
    );
    assert_eq!(i.groups.len(), 1);
    assert_eq!(i.groups[0].functional_id, "PO");
    assert_eq!(i.groups[0].control_number, "7");
    assert_eq!(i.groups[0].version, "004010");
    assert_eq!(i.sets.len(), 1);
    assert_eq!(i.sets[0].id, "850");
    assert_eq!(i.sets[0].control_number, "0001");
    assert_eq!(i.sets[0].segments, 3);
    let span = i.sets[0].span.clone();
    assert!(i.raw[span.clone()].starts_with(b"ST*850"));
    assert!(i.raw[span].ends_with(b"SE*3*0001~"));
    assert_eq!(i.segments, 7);
    assert_eq!(i.raw.len(), text.len());
    assert!(!i.isa.is_test());
}

#[test]
fn a_bom_white_space_and_line_breaks_are_not_content() {
    let plain = one("000000001");
    let wrapped: String = {
        // Wrapped at 80 columns as some transports do, even inside the ISA, and a line break
        // after each terminator, behind a byte-order mark.
        let with_breaks = plain.replace('~', "~\r\n  ");
        let mut out = String::from("\u{feff}");
        for (k, c) in with_breaks.chars().enumerate() {
            if k > 0 && k % 80 == 0 {
                out.push_str("\r\n");
            }
            out.push(c);
        }
        out
    };
    let a = read(&plain);
    let b = read(&wrapped);
    let (a, b) = (
        a[0].as_ref().expect("plain"),
        b[0].as_ref().expect("wrapped"),
    );
    assert_eq!(a.sha256, b.sha256, "the same content hashes the same");
    assert_eq!(a.isa, b.isa);
    assert_eq!(b.offset, 3, "after the byte-order mark");
    let other = one("000000001").replace("PO1", "PO2");
    assert_ne!(read(&other)[0].as_ref().expect("valid").sha256, a.sha256);
}

#[test]
fn a_line_break_may_be_the_terminator() {
    let text = one("000000001").replace('~', "\n");
    let i = read(&text).remove(0).expect("LF terminator");
    assert_eq!(i.separators.terminator, b'\n');
    assert_eq!(i.sets[0].segments, 3);
}

#[test]
fn several_interchanges_follow_each_other() {
    let text = format!(
        "{}\r\n{}{}",
        one("000000001"),
        one("000000002"),
        one("000000003")
    );
    let items = read(&text);
    let numbers: Vec<_> = items
        .iter()
        .map(|i| i.as_ref().expect("valid").isa.control_number.to_string())
        .collect();
    assert_eq!(numbers, ["000000001", "000000002", "000000003"]);
    let second = one("000000001").len() + 2;
    assert_eq!(items[1].as_ref().map(|i| i.offset).ok(), Some(second));
}

#[test]
fn an_edifact_interchange_after_an_x12_one_is_handed_over() {
    let x12 = one("000000001");
    let text = format!("{x12}\nUNB+UNOC:3+S+R+260101:1200+R1'UNZ+0+R1'");
    let mut all = interchanges(text.as_bytes());
    assert!(all.next().is_some_and(|i| i.is_ok()));
    assert!(all.next().is_none());
    assert_eq!(all.handover(), Some(x12.len() + 1));
}

#[test]
fn repetition_separator_from_00402_and_a_kept_u_tolerated() {
    let text = one("000000001").replace("*U*00401*", "*^*00501*");
    let i = read(&text).remove(0).expect("00501");
    assert_eq!(i.separators.repetition, Some(b'^'));
    let kept_u = one("000000001").replace("*U*00401*", "*U*00501*");
    let i = read(&kept_u).remove(0).expect("U under 00501");
    assert_eq!(i.separators.repetition, None);
}

#[test]
fn a_repeated_st02_in_a_group_is_tolerated() {
    let text = one("000000001").replace(
        "SE*3*0001~GE*1*7~",
        "SE*3*0001~ST*850*0001~BEG*00*SA*PO2**20260101~SE*3*0001~GE*2*7~",
    );
    let i = read(&text).remove(0).expect("repeated ST02");
    assert_eq!(i.sets.len(), 2);
}

#[test]
fn an_isa_element_of_another_width_is_named() {
    let text = one("000000001").replace("*SENDER         *", "*SENDER        *");
    let e = only_error(&text);
    assert_eq!(e.offset, 0);
    assert_eq!(
        e.kind,
        ErrorKind::IsaWidth {
            element: 6,
            found: 14,
            width: 15
        }
    );
    assert_eq!(e.ack_code(), AckCode::Interchange("006"));
    assert_eq!(e.tag.as_deref(), Some("ISA"));
}

#[test]
fn isa13_must_be_nine_digits_and_isa15_p_or_t() {
    let text = one("00000000A");
    let e = only_error(&text);
    assert_eq!(e.code(), "isa13");
    let text = one("000000001").replace("*0*P*:~", "*0*X*:~");
    let e = only_error(&text);
    assert_eq!(e.code(), "isa15");
    assert_eq!(e.ack_code(), AckCode::Interchange("020"));
    let test = one("000000001").replace("*0*P*:~", "*0*T*:~");
    assert!(read(&test)[0].as_ref().expect("test").isa.is_test());
}

/// An ISA read whole whose ISA13 or ISA15 is wrong still names who sent it: the rejection is
/// keyed and answered by a TA1 with the note code of the element (018, 020).
#[test]
fn a_wrong_isa13_or_isa15_keeps_the_isa_for_the_answer() {
    for (text, control, note) in [
        (one("00000000A"), "00000000A", "018"),
        (
            one("000000001").replace("*0*P*:~", "*0*X*:~"),
            "000000001",
            "020",
        ),
    ] {
        let contexts = rejected_contexts(text.as_bytes());
        let c = contexts
            .get(&0)
            .unwrap_or_else(|| panic!("the ISA's error at byte 0 has its context: {contexts:?}"));
        assert_eq!(
            (c.isa.sender.as_str(), c.isa.receiver.as_str()),
            ("SENDER", "RECEIVER")
        );
        assert_eq!(c.isa.control_number, control);
        assert_eq!(c.separators.terminator, b'~');
        assert!(c.group.is_none() && c.set.is_none(), "{c:?}");
        assert_eq!(c.ack, AckCode::Interchange(note));
    }
}

#[test]
fn separators_must_differ_and_not_be_letters() {
    let text = one("000000001")
        .replace("*^*00501*", "")
        .replace("*U*00401*", "*:*00501*");
    let e = only_error(&text);
    assert_eq!(e.code(), "same-separators", "{e}");
    let letter = one("000000001").replace("*0*P*:~", "*0*P*A~");
    assert_eq!(only_error(&letter).code(), "bad-separator");
}

#[test]
fn counts_and_control_numbers_are_checked_at_their_segment() {
    let base = one("000000001");
    let cases = [
        ("SE*3*0001~", "SE*4*0001~", "se-count", AckCode::Set("4")),
        (
            "SE*3*0001~",
            "SE*3*0002~",
            "se-reference",
            AckCode::Set("3"),
        ),
        ("GE*1*7~", "GE*2*7~", "ge-count", AckCode::Group("5")),
        ("GE*1*7~", "GE*1*8~", "ge-reference", AckCode::Group("4")),
        (
            "IEA*1*000000001~",
            "IEA*2*000000001~",
            "iea-count",
            AckCode::Interchange("021"),
        ),
        (
            "IEA*1*000000001~",
            "IEA*1*000000002~",
            "iea-reference",
            AckCode::Interchange("001"),
        ),
    ];
    for (from, to, code, ack) in cases {
        let text = base.replace(from, to);
        let e = only_error(&text);
        assert_eq!(e.code(), code, "{to}: {e}");
        assert_eq!(e.offset, text.find(to).expect("the segment"), "{to}: {e}");
        assert_eq!(e.end, e.offset + to.len());
        assert_eq!(e.ack_code(), ack);
        assert!(e.is_recoverable());
        assert_eq!(e.control_number.as_deref(), Some("000000001"));
        // The interchange after it is still read.
        let two = format!("{text}{}", one("000000002"));
        let items = read(&two);
        assert_eq!(items.len(), 2, "{to}");
        assert!(items[1].is_ok(), "{to}");
    }
}

#[test]
fn structure_errors_stop_the_reading() {
    let base = one("000000001");
    let cases = [
        ("SE*3*0001~", "", "st-without-se"),
        (
            "GS*PO*APPSEND*APPRECV*20260101*1200*7*X*004010~",
            "",
            "st-outside-group",
        ),
        ("GE*1*7~", "", "gs-without-ge"),
        (
            "ST*850*0001~BEG*00*SA*PO1**20260101~SE*3*0001~GE*1*7~",
            "GE*0*7~",
            "lower-empty-is-fine",
        ),
        (
            "BEG*00*SA*PO1**20260101~",
            "BEG*00*SA*PO1**20260101~SE*3*0001~REF*X~",
            "outside-set",
        ),
        ("BEG*", "beg*", "bad-tag"),
    ];
    for (from, to, code) in cases {
        let text = base.replace(from, to);
        let both = format!("{text}{}", one("000000002"));
        let items = read(&both);
        if code == "lower-empty-is-fine" {
            assert!(
                items.iter().all(Result::is_ok),
                "an empty group is read: {items:?}"
            );
            continue;
        }
        let e = items[0].as_ref().expect_err(code);
        assert_eq!(e.code(), code, "{e}");
        assert!(!e.is_recoverable());
        assert_eq!(
            items.len(),
            1,
            "{code}: nothing read after a broken structure"
        );
    }
}

#[test]
fn data_ending_early_is_an_error_at_its_end() {
    let base = one("000000001");
    let cut = &base[..base.len() - 10];
    let e = only_error(cut);
    assert_eq!(e.code(), "unterminated");
    assert_eq!(e.offset, base.find("IEA").expect("IEA"));
    let cut = &base[..base.find("GE*").expect("GE")];
    let e = only_error(cut);
    assert_eq!(e.code(), "missing-iea");
    assert_eq!(e.offset, cut.len());
    assert_eq!(only_error(&base[..50]).code(), "truncated-isa");
    assert_eq!(only_error("").code(), "empty");
    assert_eq!(only_error("\u{feff} \r\n").code(), "empty");
}

#[test]
fn anything_but_an_interchange_is_named() {
    let e = only_error("HELLO");
    assert_eq!(e.code(), "no-interchange");
    let text = format!("{}\u{1a}", one("000000001"));
    let items = read(&text);
    assert!(items[0].is_ok());
    let e = items[1].as_ref().expect_err("data after IEA");
    assert_eq!(e.code(), "data-after-iea");
    assert_eq!(e.offset, text.len() - 1);
}

#[test]
fn an_interchange_level_ta1_stands_outside_the_groups() {
    let text = format!(
        "{}TA1*000000007*260101*1200*A*000~IEA*0*000000001~",
        isa("SENDER", "RECEIVER", "000000001", "00401", "U")
    );
    let i = read(&text).remove(0).expect("a TA1 alone");
    assert_eq!(i.outside, ["TA1"]);
    assert!(i.groups.is_empty());
}

#[test]
fn no_input_panics_or_runs_away() {
    // Every prefix of valid data, and bytes turned into each delimiter, read to an end.
    let base = one("000000001");
    for k in 0..=base.len() {
        let _ = interchanges(&base.as_bytes()[..k]).count();
    }
    for k in 0..base.len() {
        for b in [b'*', b':', b'~', b'\r', b'\n', 0, 0xFF, b'I'] {
            let mut bytes = base.clone().into_bytes();
            bytes[k] = b;
            assert!(interchanges(&bytes).count() <= 2);
        }
    }
    let long = format!("ISA*{}", "x".repeat(100_000));
    assert_eq!(only_error(&long).code(), "truncated-isa");
}

#[test]
fn the_first_error_is_reported_though_the_structure_breaks_later() {
    // GE02 wrong, then the IEA without its terminator: rejected for GE02, the reading stops.
    let base = one("000000001").replace("GE*1*7~", "GE*1*8~");
    let cut = &base[..base.len() - 1];
    let items = read(cut);
    assert_eq!(items.len(), 1);
    let e = items[0].as_ref().expect_err("GE02");
    assert_eq!(e.code(), "ge-reference", "{e}");
}

#[test]
fn a_rejected_interchange_keeps_its_isa_and_the_group_and_set_its_error_stands_in() {
    // SE01 wrong in the second set of the group: the set, its group (two sets read) and
    // AK502 `4` are what the answer names.
    let good = one("000000001");
    let bad = one("000000002").replace(
        "SE*3*0001~",
        "SE*3*0001~ST*850*0002~BEG*00*SA*PO2**20260101~SE*9*0002~",
    );
    let bad = bad.replace("GE*1*7~", "GE*2*7~");
    let data = format!("{good}{bad}");
    let contexts = rejected_contexts(data.as_bytes());
    assert_eq!(contexts.len(), 1, "{contexts:?}");
    let at = data.find("SE*9*0002").expect("the wrong SE");
    let c = &contexts[&at];
    assert_eq!(
        (c.isa.sender.as_str(), c.isa.control_number.as_str()),
        ("SENDER", "000000002")
    );
    assert_eq!(c.separators.element, b'*');
    let g = c.group.as_ref().expect("the group the set is in");
    assert_eq!((g.control_number.as_str(), g.sets), ("7", 2));
    let s = c.set.as_ref().expect("the set in error");
    assert_eq!((s.id.as_str(), s.control_number.as_str()), ("850", "0002"));
    assert_eq!(c.ack, AckCode::Set("4"));
}

#[test]
fn a_groups_error_names_the_group_alone_and_an_interchanges_neither() {
    let ge = one("000000003").replace("GE*1*7~", "GE*1*8~");
    let contexts = rejected_contexts(ge.as_bytes());
    let c = &contexts[&ge.find("GE*1*8").expect("GE")];
    assert_eq!(
        c.group.as_ref().map(|g| g.control_number.as_str()),
        Some("7")
    );
    assert!(c.set.is_none(), "{c:?}");
    assert_eq!(c.ack, AckCode::Group("4"));

    let iea = one("000000004").replace("IEA*1*000000004~", "IEA*2*000000004~");
    let contexts = rejected_contexts(iea.as_bytes());
    let c = &contexts[&iea.find("IEA*2").expect("IEA")];
    assert!(c.group.is_none() && c.set.is_none(), "{c:?}");
    assert_eq!(c.ack, AckCode::Interchange("021"));

    // A structural error: the set left open, the group it is in.
    let open = one("000000005").replace("SE*3*0001~", "");
    let contexts = rejected_contexts(open.as_bytes());
    let c = &contexts[&open.find("GE*1*7").expect("GE")];
    assert_eq!(
        c.set.as_ref().map(|s| s.control_number.as_str()),
        Some("0001")
    );
    assert_eq!(c.group.as_ref().map(|g| g.sets), Some(1));
    assert_eq!(c.ack, AckCode::Set("2"));

    // No ISA read: nothing to key or answer.
    let short = one("000000006").replacen("SENDER ", "SENDER", 1);
    assert!(rejected_contexts(short.as_bytes()).is_empty());
}
