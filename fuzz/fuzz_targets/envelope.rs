//! Any bytes: the envelope parser must neither panic nor loop, and what it reports must point
//! inside the input; every message it accepts reads whole (`edifact::message_segments`) and
//! renders as JSON, segment for segment.
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
                    // A message the envelope accepted reads whole, and renders as JSON.
                    let segments = edi_inbox::edifact::message_segments(&i, m)
                        .unwrap_or_else(|e| panic!("an accepted message: {e}"));
                    let json = serde_json::to_value(&segments).expect("renders");
                    assert_eq!(json.as_array().map(Vec::len), Some(m.segments));
                }
            }
            Err(e) => {
                assert!(e.offset <= data.len());
                let _ = e.to_string();
            }
        }
    }
});
