//! The X12 envelope reader on arbitrary bytes: it must end, never panic, and every interchange
//! it accepts must lie inside the input, with each transaction set inside the interchange; what
//! it keeps of a rejected one (to key and answer it) must name the group and set its
//! acknowledgement code speaks of.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for item in edi_inbox::x12::interchanges(data) {
        match item {
            Ok(i) => {
                assert!(i.offset + i.raw.len() <= data.len());
                assert!(i.raw.starts_with(b"ISA"));
                for set in &i.sets {
                    assert!(set.span.end <= i.raw.len() && set.span.start < set.span.end);
                    assert!(set.group < i.groups.len());
                }
            }
            Err(e) => assert!(e.offset <= data.len() && e.end <= data.len()),
        }
    }
    for (offset, c) in edi_inbox::x12::rejected_contexts(data) {
        assert!(offset <= data.len());
        // A set stands in a group; a set's or a group's code names one.
        assert!(c.set.is_none() || c.group.is_some());
        match c.ack {
            edi_inbox::x12::AckCode::Set(_) => assert!(c.set.is_some()),
            edi_inbox::x12::AckCode::Group(_) => assert!(c.group.is_some()),
            edi_inbox::x12::AckCode::Interchange(_) => {}
        }
    }
});
