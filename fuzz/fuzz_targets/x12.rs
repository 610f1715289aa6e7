//! The X12 envelope reader on arbitrary bytes: it must end, never panic, and every interchange
//! it accepts must lie inside the input, with each transaction set inside the interchange.
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
});
