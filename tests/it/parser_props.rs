//! Property tests: no input makes the parser panic or loop, and the payload hash and keys ignore
//! exactly what they promise to ignore.

use std::path::Path;

use crate::common::synth::{Layout, Synth};
use edi_inbox::edifact::{Interchange, interchanges, message_segments};
use proptest::prelude::*;

/// Reads every interchange and error of `data`, checking what must hold for any input.
fn read_all(data: &[u8]) -> Vec<Result<Interchange<'_>, String>> {
    let mut out = Vec::new();
    for item in interchanges(data) {
        // Each item consumes at least one segment, so a file cannot yield more items than bytes.
        assert!(out.len() <= data.len(), "the iterator does not end");
        match item {
            Ok(i) => {
                assert!(i.offset + i.raw.len() <= data.len());
                for m in &i.messages {
                    assert!(m.span.end <= i.raw.len());
                    // The whole message reads too: what the envelope accepted, the segment
                    // reader splits and renders, segment for segment, without a panic.
                    let segments = message_segments(&i, m).unwrap_or_else(|e| {
                        panic!("message {} of an accepted interchange: {e}", m.reference)
                    });
                    let text = serde_json::to_string(&segments).unwrap();
                    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
                    assert_eq!(json.as_array().map(Vec::len), Some(m.segments));
                    // The writer the side effects bind (`to_json`) gives serde's bytes, each
                    // segment's place in them the segment's own array.
                    let direct = segments.to_json();
                    assert_eq!(direct.text, text, "message {}", m.reference);
                    for (k, (_, span)) in direct.segments.iter().enumerate() {
                        let one: serde_json::Value =
                            serde_json::from_str(&direct.text[span.clone()]).unwrap();
                        assert_eq!(
                            Some(&one),
                            json.get(k),
                            "message {} segment {k}",
                            m.reference
                        );
                    }
                }
                out.push(Ok(i));
            }
            Err(e) => {
                assert!(e.offset <= data.len(), "{e} beyond {} bytes", data.len());
                let text = e.to_string();
                assert!(text.contains(&format!("byte {}", e.offset)), "{text}");
                out.push(Err(text));
            }
        }
    }
    out
}

fn samples() -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("samples");
    walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file() && e.file_name() != "README.md")
        .map(|e| std::fs::read(e.path()).unwrap())
        .collect()
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Insert(usize, u8),
    Delete(usize),
    Truncate(usize),
    Duplicate(usize, usize),
}

fn apply(mut data: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for m in mutations {
        let len = data.len().max(1);
        match *m {
            Mutation::Flip(i, b) if !data.is_empty() => data[i % len] ^= b,
            Mutation::Insert(i, b) => data.insert(i % (data.len() + 1), b),
            Mutation::Delete(i) if !data.is_empty() => {
                data.remove(i % len);
            }
            Mutation::Truncate(i) => data.truncate(i % (data.len() + 1)),
            Mutation::Duplicate(a, n) if !data.is_empty() => {
                let a = a % len;
                let end = (a + n % 64).min(data.len());
                let copy = data[a..end].to_vec();
                data.splice(a..a, copy);
            }
            _ => {}
        }
    }
    data
}

/// Bytes that matter to the lexer, so that random input often looks like EDIFACT.
fn edifact_byte() -> impl Strategy<Value = u8> {
    prop_oneof![
        4 => prop::sample::select(b"UNBZHTGEA:+.? '\r\n\x1c\x1d\x1f0123456789".to_vec()),
        1 => any::<u8>(),
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1u8..).prop_map(|(i, b)| Mutation::Flip(i, b)),
        (any::<usize>(), edifact_byte()).prop_map(|(i, b)| Mutation::Insert(i, b)),
        any::<usize>().prop_map(Mutation::Delete),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), any::<usize>()).prop_map(|(a, n)| Mutation::Duplicate(a, n)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..2048)) {
        read_all(&data);
    }

    #[test]
    fn edifact_like_bytes_never_panic(
        head in prop::sample::select(vec![&b""[..], b"UNA:+.? '", b"UNB+UNOC:3+S+R+1:1+X'", b"UNA"]),
        data in prop::collection::vec(edifact_byte(), 0..512),
    ) {
        let mut input = head.to_vec();
        input.extend_from_slice(&data);
        read_all(&input);
    }

    #[test]
    fn mutated_samples_never_panic(
        which in any::<prop::sample::Index>(),
        mutations in prop::collection::vec(mutation(), 1..8),
    ) {
        let all = samples();
        let data = apply(all[which.index(all.len())].clone(), &mutations);
        read_all(&data);
    }

    /// A redelivery that only adds line breaks or padding between segments is the same payload.
    #[test]
    fn line_breaks_between_segments_do_not_change_hash_or_key(
        seed in any::<u64>(),
        breaks in prop::collection::vec(prop::sample::select(vec![&b"\r\n"[..], b"\n", b"\r", b" ", b"\t", b""]), 1..64),
    ) {
        let mut g = Synth::new(seed);
        let n = 1 + g.below(5) as usize;
        let plain = g.interchange("SENDER", "RECIPIENT", "REF", n, Layout::default());
        let mut broken = Vec::new();
        let mut k = 0;
        for &b in &plain {
            broken.push(b);
            if b == b'\'' {
                broken.extend_from_slice(breaks[k % breaks.len()]);
                k += 1;
            }
        }
        let a = interchanges(&plain).next().unwrap().unwrap();
        let b = interchanges(&broken).next().unwrap().unwrap();
        prop_assert_eq!(a.sha256, b.sha256);
        prop_assert_eq!(&a.unb, &b.unb);
        prop_assert_eq!(a.messages.len(), b.messages.len());
    }

    /// A line break anywhere inside a segment (a wrapping transport) changes nothing either.
    #[test]
    fn wrapping_inside_segments_changes_nothing(seed in any::<u64>(), width in 1usize..120) {
        let mut g = Synth::new(seed);
        let plain = g.interchange("SENDER", "RECIPIENT", "REF", 2, Layout::default());
        let wrapped: Vec<u8> = plain.chunks(width).collect::<Vec<_>>().join(&b"\r\n"[..]);
        let a = interchanges(&plain).next().unwrap().unwrap();
        let b = interchanges(&wrapped).next().unwrap().unwrap();
        prop_assert_eq!(a.sha256, b.sha256);
        prop_assert_eq!(a.unb, b.unb);
    }

    /// Any value survives escaping: the key read back is the value written; one made only of
    /// spaces is missing.
    #[test]
    fn escaped_keys_read_back(
        sender in "[A-Z0-9:+?' .]{1,20}",
        reference in "[A-Z0-9:+?' ]{1,14}",
    ) {
        let escape = |s: &str| {
            let mut out = String::new();
            for c in s.chars() {
                if matches!(c, '?' | ':' | '+' | '\'') {
                    out.push('?');
                }
                out.push(c);
            }
            out
        };
        let data = format!(
            "UNB+UNOA:3+{}+R+240101:1200+{}'UNH+1+ORDERS:D:96A:UN'UNT+2+1'UNZ+1+{}'",
            escape(&sender), escape(&reference), escape(&reference)
        );
        let i = interchanges(data.as_bytes()).next().unwrap();
        if sender.trim_matches(' ').is_empty() || reference.trim_matches(' ').is_empty() {
            prop_assert_eq!(i.map_err(|e| e.code()).err(), Some("missing-element"));
            return Ok(());
        }
        let i = i.map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(i.unb.sender, sender);
        prop_assert_eq!(i.unb.control_ref, reference);
    }

    /// Any change of a data byte inside a segment changes the hash.
    #[test]
    fn a_changed_byte_changes_the_hash(seed in any::<u64>(), at in any::<prop::sample::Index>()) {
        let mut g = Synth::new(seed);
        let plain = g.interchange("SENDER", "RECIPIENT", "REF", 3, Layout::default());
        let digits: Vec<usize> = plain.iter().enumerate()
            .filter(|(_, b)| b.is_ascii_digit()).map(|(i, _)| i).collect();
        let i = digits[at.index(digits.len())];
        let mut changed = plain.clone();
        changed[i] = if plain[i] == b'9' { b'8' } else { plain[i] + 1 };
        let a = interchanges(&plain).next().unwrap().unwrap().sha256;
        // The change may break a count and be rejected; if it is accepted, its hash differs.
        if let Some(Ok(b)) = interchanges(&changed).next() {
            prop_assert_ne!(a, b.sha256);
        }
    }
}

/// Inputs kept because they once mattered: hostile shapes and any crash the fuzzer finds.
#[test]
fn hostile_inputs_are_rejected_without_panic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile");
    let mut seen = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let data = std::fs::read(entry.unwrap().path()).unwrap();
        let all = read_all(&data);
        assert!(all.iter().any(Result::is_err), "accepted: {all:?}");
        seen += 1;
    }
    assert!(seen >= 5);
}

#[test]
fn one_endless_segment_is_an_error_not_a_hang() {
    let mut data = b"UNB+UNOC:3+S+R+1:1+X'UNH+1+ORDERS:D:96A:UN'FTX+".to_vec();
    data.resize(32 << 20, b'A');
    let all = read_all(&data);
    assert_eq!(all.len(), 1);
    assert!(
        all[0]
            .as_ref()
            .unwrap_err()
            .contains("has no segment terminator"),
        "{all:?}"
    );
}

#[test]
fn a_segment_with_a_million_elements_is_read() {
    let mut data = b"UNB+UNOC:3+S+R+1:1+X".to_vec();
    data.extend(std::iter::repeat_n(&b"+E"[..], 1_000_000).flatten());
    data.extend_from_slice(b"'UNH+1+ORDERS:D:96A:UN'FTX");
    data.extend(std::iter::repeat_n(&b"+:"[..], 1_000_000).flatten());
    data.extend_from_slice(b"'UNT+3+1'UNZ+1+X'");
    let all = read_all(&data);
    assert_eq!(all.len(), 1);
    assert!(all[0].is_ok(), "{all:?}");
}

/// The synthetic interchanges the tests and benchmarks are made of are valid, and the same for a
/// seed.
#[test]
fn generated_interchanges_are_valid_and_deterministic() {
    for seed in 0..50 {
        let mut g = Synth::new(seed);
        let layout = g.layout();
        let n = 1 + g.below(20) as usize;
        let data = g.interchange("SENDER", "RECIPIENT", &format!("R{seed}"), n, layout);
        let i = interchanges(&data).next().unwrap().unwrap();
        assert_eq!(i.messages.len(), n);
        assert_eq!(i.groups.len(), usize::from(layout.group));
        let again = Synth::new(seed).interchange("SENDER", "RECIPIENT", "X", 0, layout);
        let first = Synth::new(seed).interchange("SENDER", "RECIPIENT", "X", 0, layout);
        assert_eq!(again, first);
    }
}
