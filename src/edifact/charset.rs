//! Character repertoires by syntax identifier (UNB S001 element 0001).

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

    #[test]
    fn bytes_outside_the_repertoire_still_map() {
        assert_eq!(Charset::for_syntax("UNOA").decode(b"\xc4"), "Ä");
        assert_eq!(Charset::for_syntax("UNOW").decode(b"\xff"), "ÿ");
    }
}
