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

    #[test]
    fn bytes_outside_the_repertoire_still_map() {
        assert_eq!(Charset::for_syntax("UNOA").decode(b"\xc4"), "Ä");
        assert_eq!(Charset::for_syntax("UNOW").decode(b"\xff"), "ÿ");
    }
}
