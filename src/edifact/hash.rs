//! The payload hash: SHA-256 over an interchange's segments, as they stand in the file without
//! line breaks, behind the service characters where they are not the defaults.

use super::syntax::Separators;

pub(super) use crate::segment_hash::SegmentHasher;

/// What goes into the hash ahead of the segments for service characters other than the level A
/// defaults: `UNA` and the component separator, element separator, release character (a space
/// for none) and segment terminator. The segments start with `UNB`, so it can never be mistaken
/// for them.
pub(super) fn hash_preamble(seps: &Separators) -> Option<[u8; 7]> {
    let l = Separators::LEVEL_A;
    let same = (seps.component, seps.element, seps.release, seps.terminator)
        == (l.component, l.element, l.release, l.terminator);
    (!same).then(|| {
        [
            b'U',
            b'N',
            b'A',
            seps.component,
            seps.element,
            seps.release.unwrap_or(b' '),
            seps.terminator,
        ]
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edifact::{Interchange, interchanges};
    use sha2::{Digest, Sha256};

    const ORDERS: &[u8] = b"UNB+UNOC:3+SENDER:14+RECIPIENT:14+240101:1200+REF1'\
UNH+1+ORDERS:D:96A:UN'BGM+220+PO1+9'UNT+3+1'UNZ+1+REF1'";

    fn one(data: &[u8]) -> Interchange<'_> {
        let all: Vec<_> = interchanges(data).collect();
        assert_eq!(all.len(), 1, "{all:?}");
        all.into_iter().next().unwrap().unwrap()
    }

    fn replace(data: &[u8], from: &str, to: &str) -> Vec<u8> {
        String::from_utf8(data.to_vec())
            .unwrap()
            .replace(from, to)
            .into_bytes()
    }

    #[test]
    fn hash_ignores_line_breaks_and_a_default_una() {
        let base = one(ORDERS).sha256;
        let crlf = String::from_utf8(ORDERS.to_vec())
            .unwrap()
            .replace('\'', "'\r\n");
        assert_eq!(one(crlf.as_bytes()).sha256, base);
        let mut with_una = b"UNA:+.? '\n".to_vec();
        with_una.extend_from_slice(ORDERS);
        assert_eq!(one(&with_una).sha256, base);
        let wrapped = replace(ORDERS, "ORDERS:D", "ORD\r\nERS:D");
        assert_eq!(one(&wrapped).sha256, base);
        let padded = replace(ORDERS, "'UNZ", "' \t UNZ");
        assert_eq!(one(&padded).sha256, base);
    }

    /// The same bytes under another release character decode to other values: not a duplicate.
    #[test]
    fn hash_changes_with_the_service_characters_in_force() {
        let body = "UNB+UNOC:3+S+R+240101:1200+REF1'UNH+1+ORDERS:D:96A:UN'FTX+AAA+++A?+B!+C'UNT+3+1'UNZ+1+REF1'";
        let question = one(format!("UNA:+.? '{body}").as_bytes()).sha256;
        let bang = one(format!("UNA:+.! '{body}").as_bytes()).sha256;
        assert_ne!(question, bang);
        // The defaults stated or not, the decimal mark, the repetition separator: the same.
        assert_eq!(question, one(body.as_bytes()).sha256);
        assert_eq!(question, one(format!("UNA:+,? '{body}").as_bytes()).sha256);
        assert_eq!(question, one(format!("UNA:+.?*'{body}").as_bytes()).sha256);
        assert_eq!(
            bang,
            <[u8; 32]>::from(Sha256::digest(format!("UNA:+!'{body}").as_bytes()))
        );
    }

    #[test]
    fn hash_changes_with_any_other_byte() {
        let base = one(ORDERS).sha256;
        assert_ne!(one(&replace(ORDERS, "PO1", "PO2")).sha256, base);
        assert_ne!(one(&replace(ORDERS, "PO1", "PO 1")).sha256, base);
    }

    #[test]
    fn hash_is_sha256_of_the_segments() {
        let i = one(ORDERS);
        assert_eq!(i.sha256_hex(), hex::encode(Sha256::digest(ORDERS)));
    }

    /// Segments of every length from 0 to 200 bytes of text, some wrapped, gathered across many
    /// buffer fills and ending at the very end of the input (where a whole stride cannot be read).
    #[test]
    fn hash_is_the_same_however_the_segments_are_gathered() {
        let mut data = b"UNB+UNOC:3+S+R+240101:1200+REF1'UNH+1+ORDERS:D:96A:UN'".to_vec();
        let mut segments = 2;
        for round in 0..60 {
            for len in 0..=200 {
                data.extend_from_slice(b"FTX+AAA+++");
                let text = vec![b'a' + (len % 26) as u8; len];
                if round % 7 == 0 && len > 2 {
                    data.extend_from_slice(&text[..len / 2]);
                    data.extend_from_slice(b"\r\n");
                    data.extend_from_slice(&text[len / 2..]);
                } else {
                    data.extend_from_slice(&text);
                }
                data.extend_from_slice(if len % 3 == 0 { b"'\r\n" } else { b"'" });
                segments += 1;
            }
        }
        data.extend_from_slice(format!("UNT+{}+1'UNZ+1+REF1'", segments).as_bytes());
        let expected: Vec<u8> = data
            .iter()
            .copied()
            .filter(|&b| b != b'\r' && b != b'\n')
            .collect();
        assert!(expected.len() > 20 * SegmentHasher::GATHER);
        assert_eq!(
            one(&data).sha256,
            <[u8; 32]>::from(Sha256::digest(&expected))
        );
    }
}
