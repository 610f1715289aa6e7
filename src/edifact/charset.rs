//! Character repertoires by syntax identifier (UNB S001 element 0001).

use std::borrow::Cow;

use compact_str::CompactString;
use encoding_rs::Encoding;

/// How the text of an interchange is decoded, chosen by its syntax identifier (0001).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Charset {
    /// UNOA, UNOB: ISO 646 (ASCII subsets).
    Ascii,
    /// UNOC (ISO 8859-1), and every identifier outside the UN list (IATA, IATB, ANSI...), so that
    /// every byte maps to a character.
    Latin1,
    /// UNOD..UNOK: the other parts of ISO 8859.
    Iso8859(&'static Encoding),
    /// UNOW, UNOY: ISO 10646 as UTF-8.
    Utf8,
}

impl Charset {
    /// The repertoire for a syntax identifier such as `UNOC`.
    pub fn for_syntax(id: &str) -> Charset {
        match id {
            "UNOA" | "UNOB" => Charset::Ascii,
            "UNOC" => Charset::Latin1,
            "UNOD" => Charset::Iso8859(encoding_rs::ISO_8859_2),
            "UNOE" => Charset::Iso8859(encoding_rs::ISO_8859_5),
            "UNOF" => Charset::Iso8859(encoding_rs::ISO_8859_7),
            "UNOG" => Charset::Iso8859(encoding_rs::ISO_8859_3),
            "UNOH" => Charset::Iso8859(encoding_rs::ISO_8859_4),
            "UNOI" => Charset::Iso8859(encoding_rs::ISO_8859_6),
            "UNOJ" => Charset::Iso8859(encoding_rs::ISO_8859_8),
            // The WHATWG tables behind encoding_rs serve ISO 8859-9 as windows-1254, which agrees
            // with it on every printable character.
            "UNOK" => Charset::Iso8859(encoding_rs::WINDOWS_1254),
            "UNOW" | "UNOY" => Charset::Utf8,
            _ => Charset::Latin1,
        }
    }

    /// Decodes unescaped bytes. Never fails: bytes that the repertoire does not allow (real
    /// traffic has them) are read as ISO 8859-1, so the same bytes always give the same text.
    ///
    /// A [`CompactString`] keeps the short values of an envelope (references, qualifiers, message
    /// types) without allocating.
    pub fn decode(&self, bytes: &[u8]) -> CompactString {
        // Envelope values are nearly always ASCII, which every repertoire here reads alike.
        if bytes.is_ascii()
            && let Ok(text) = std::str::from_utf8(bytes)
        {
            return CompactString::from(text);
        }
        match self {
            Charset::Ascii => latin1(bytes),
            Charset::Utf8 => match std::str::from_utf8(bytes) {
                Ok(s) => CompactString::from(s),
                Err(_) => latin1(bytes),
            },
            Charset::Latin1 => latin1(bytes),
            Charset::Iso8859(enc) => CompactString::from(enc.decode_without_bom_handling(bytes).0),
        }
    }
}

impl Charset {
    /// Decodes unescaped bytes replacing nothing: a message's values (`super::message`), which
    /// must give back the bytes they were read from. Text in the repertoire reads as
    /// [`Charset::decode`] reads it; each byte the repertoire does not define (above 0x7F under
    /// UNOA and UNOB, a byte ISO 8859-3, -6, -7 or -8 leaves undefined, a byte of no UTF-8
    /// sequence under UNOW and UNOY) reads as the ISO 8859-1 character of its number, and is
    /// counted: the second value. (Under UNOJ, ISO 8859-8, the undefined 0xD7 so reads as `×`,
    /// which the repertoire has at 0xAA: the count tells them apart.) Where `decode` differs: it reads an undefined byte of ISO
    /// 8859-3, -6, -7 or -8 as U+FFFD, and a value with a stray byte under UTF-8 wholly as ISO
    /// 8859-1 (envelope values, whose keys are stored so and must stay so).
    ///
    /// Borrows where the bytes are ASCII or, under UNOW and UNOY, UTF-8, which is nearly always.
    pub fn decode_exact<'a>(&self, bytes: &'a [u8]) -> (Cow<'a, str>, usize) {
        if bytes.is_ascii()
            && let Ok(text) = std::str::from_utf8(bytes)
        {
            return (Cow::Borrowed(text), 0);
        }
        let latin1 = |bytes: &[u8]| bytes.iter().map(|&b| b as char).collect::<String>();
        match self {
            Charset::Latin1 => (Cow::Owned(latin1(bytes)), 0),
            Charset::Ascii => {
                let outside = bytes.iter().filter(|b| !b.is_ascii()).count();
                (Cow::Owned(latin1(bytes)), outside)
            }
            Charset::Utf8 => match std::str::from_utf8(bytes) {
                Ok(text) => (Cow::Borrowed(text), 0),
                Err(_) => {
                    let mut text = String::with_capacity(bytes.len() + 8);
                    let mut outside = 0;
                    for chunk in bytes.utf8_chunks() {
                        text.push_str(chunk.valid());
                        for &b in chunk.invalid() {
                            text.push(b as char);
                            outside += 1;
                        }
                    }
                    (Cow::Owned(text), outside)
                }
            },
            Charset::Iso8859(enc) => {
                if let Some(text) = enc.decode_without_bom_handling_and_without_replacement(bytes) {
                    return (Cow::Owned(text.into_owned()), 0);
                }
                let mut text = String::with_capacity(bytes.len() + 8);
                let mut outside = 0;
                for &b in bytes {
                    match enc.decode_without_bom_handling_and_without_replacement(&[b]) {
                        Some(c) => text.push_str(&c),
                        None => {
                            text.push(b as char);
                            outside += 1;
                        }
                    }
                }
                (Cow::Owned(text), outside)
            }
        }
    }

    /// Encodes text in this repertoire, the inverse of [`Charset::decode`]: a value read from an
    /// interchange is written back as the bytes it was read from (a CONTRL copying a partner's
    /// identification, say: `MÜLLER` under UNOC is 0xDC, not UTF-8's 0xC3 0x9C). A character
    /// that decoding reads from a byte outside the repertoire (as ISO 8859-1) is written as that
    /// byte again. Only text no byte decodes to (U+FFFD, which an undefined byte of ISO 8859-3,
    /// -6, -7 or -8 reads as) cannot be given back: it is written as `?`.
    pub fn encode<'a>(&self, text: &'a str) -> Cow<'a, [u8]> {
        if text.is_ascii() || *self == Charset::Utf8 {
            return Cow::Borrowed(text.as_bytes());
        }
        let latin1 = |c: char| u8::try_from(u32::from(c)).unwrap_or(b'?');
        Cow::Owned(match self {
            Charset::Ascii | Charset::Latin1 | Charset::Utf8 => text.chars().map(latin1).collect(),
            Charset::Iso8859(enc) => {
                let mut out = Vec::with_capacity(text.len());
                let mut buf = [0u8; 4];
                for c in text.chars() {
                    let (bytes, _, unmappable) = enc.encode(c.encode_utf8(&mut buf));
                    match (unmappable, bytes.as_ref()) {
                        (false, [b]) => out.push(*b),
                        _ => out.push(latin1(c)),
                    }
                }
                out
            }
        })
    }
}

/// ISO 8859-1 maps each byte to the code point of the same number.
fn latin1(bytes: &[u8]) -> CompactString {
    bytes.iter().map(|&b| b as char).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_by_syntax_identifier() {
        assert_eq!(Charset::for_syntax("UNOC").decode(b"M\xfcller"), "Müller");
        assert_eq!(
            Charset::for_syntax("UNOY").decode("Müller".as_bytes()),
            "Müller"
        );
        assert_eq!(Charset::for_syntax("UNOD").decode(b"\xb1"), "ą");
        assert_eq!(Charset::for_syntax("UNOE").decode(b"\xb0"), "А");
        assert_eq!(Charset::for_syntax("UNOA").decode(b"ABC"), "ABC");
    }

    #[test]
    fn identifiers_outside_the_un_list_read_as_latin1() {
        assert_eq!(Charset::for_syntax("IATA"), Charset::Latin1);
        assert_eq!(Charset::for_syntax("IATB").decode(b"\xe9"), "é");
    }

    /// Every repertoire the parser decodes gives back the bytes it read: each byte from 0x20 up
    /// that the repertoire defines (and, for those that read stray bytes as ISO 8859-1, every
    /// byte), decoded and encoded again.
    #[test]
    fn encoding_gives_back_the_bytes_decoding_read() {
        let ids = [
            "UNOA", "UNOB", "UNOC", "UNOD", "UNOE", "UNOF", "UNOG", "UNOH", "UNOI", "UNOJ", "UNOK",
            "UNOW", "UNOY", "IATA",
        ];
        for id in ids {
            let cs = Charset::for_syntax(id);
            let bytes: Vec<u8> = match cs {
                Charset::Utf8 => "Łódź MÜLLER Ωμέγα 東京".as_bytes().to_vec(),
                Charset::Iso8859(enc) => (0x20..=0xffu8)
                    .filter(|b| !enc.decode_without_bom_handling(&[*b]).1)
                    .collect(),
                Charset::Ascii | Charset::Latin1 => (0x20..=0xffu8).collect(),
            };
            assert!(bytes.len() > 30, "{id}");
            let text = cs.decode(&bytes);
            assert_eq!(cs.encode(&text).as_ref(), bytes.as_slice(), "{id}: {text}");
        }
        assert_eq!(
            Charset::for_syntax("UNOC").encode("MÜLLER").as_ref(),
            b"M\xdcLLER"
        );
        assert_eq!(Charset::for_syntax("UNOD").encode("ą").as_ref(), b"\xb1");
        assert_eq!(Charset::for_syntax("UNOE").encode("А").as_ref(), b"\xb0");
        assert_eq!(
            Charset::for_syntax("UNOY").encode("Ü").as_ref(),
            "Ü".as_bytes()
        );
    }

    /// A message's values replace no byte: every byte of every repertoire reads as a character
    /// that encoding gives back as that byte (but one), under UTF-8 as every valid sequence
    /// does; the bytes the repertoire does not define are counted.
    #[test]
    fn exact_decoding_replaces_nothing_and_counts_what_is_foreign() {
        let ids = [
            "UNOA", "UNOB", "UNOC", "UNOD", "UNOE", "UNOF", "UNOG", "UNOH", "UNOI", "UNOJ", "UNOK",
            "IATA",
        ];
        for id in ids {
            let cs = Charset::for_syntax(id);
            for b in 0..=255u8 {
                let byte = [b];
                let (text, outside) = cs.decode_exact(&byte);
                assert!(!text.contains('\u{FFFD}'), "{id} {b:#04x}");
                // The one foreign byte whose ISO 8859-1 character the repertoire has elsewhere:
                // ISO 8859-8 leaves 0xD7 undefined and has × at 0xAA (counted, so never silent).
                let back: &[u8] = if (id, b) == ("UNOJ", 0xd7) {
                    &[0xaa]
                } else {
                    &byte
                };
                assert_eq!(cs.encode(&text).as_ref(), back, "{id} {b:#04x}: {text}");
                let defined = match cs {
                    Charset::Ascii => b.is_ascii(),
                    Charset::Iso8859(enc) => enc
                        .decode_without_bom_handling_and_without_replacement(&[b])
                        .is_some(),
                    _ => true,
                };
                assert_eq!(outside, usize::from(!defined), "{id} {b:#04x}");
            }
        }
        // ISO 8859-7 leaves 0xAE undefined: `decode` reads U+FFFD, `decode_exact` 0xAE's Latin-1.
        let greek = Charset::for_syntax("UNOF");
        assert_eq!(greek.decode(b"\xe1\xae"), "α\u{FFFD}");
        assert_eq!(greek.decode_exact(b"\xe1\xae"), ("α®".into(), 1));
        // UTF-8: the valid sequences as UTF-8, each stray byte as ISO 8859-1.
        let utf8 = Charset::for_syntax("UNOY");
        assert_eq!(
            utf8.decode_exact("Müller \u{1F600}".as_bytes()),
            ("Müller \u{1F600}".into(), 0)
        );
        assert_eq!(
            utf8.decode_exact(b"M\xc3\xbcller\xff\xe2\x82"),
            ("Müllerÿâ\u{82}".into(), 3)
        );
        assert_eq!(utf8.decode(b"M\xc3\xbcller\xff"), "MÃ¼llerÿ");
        assert_eq!(
            Charset::for_syntax("UNOA").decode_exact(b"K\xf6ln"),
            ("Köln".into(), 1)
        );
        assert!(matches!(
            Charset::for_syntax("UNOC").decode_exact(b"plain"),
            (Cow::Borrowed("plain"), 0)
        ));
    }

    #[test]
    fn bytes_outside_the_repertoire_still_map() {
        assert_eq!(Charset::for_syntax("UNOA").decode(b"\xc4"), "Ä");
        assert_eq!(Charset::for_syntax("UNOW").decode(b"\xff"), "ÿ");
    }
}
