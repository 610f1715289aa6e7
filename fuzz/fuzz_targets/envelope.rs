//! Any bytes: the envelope parser must neither panic nor loop, and what it reports must point
//! inside the input.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut items = 0usize;
    for item in edi_inbox::edifact::interchanges(data) {
        items += 1;
        assert!(items <= data.len() + 1, "the iterator does not end");
        match item {
            Ok(i) => {
                assert!(i.offset + i.raw.len() <= data.len());
                for m in &i.messages {
                    assert!(m.span.end <= i.raw.len());
                }
            }
            Err(e) => {
                assert!(e.offset <= data.len());
                let _ = e.to_string();
            }
        }
    }
});
