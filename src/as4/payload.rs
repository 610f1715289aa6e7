//! A payload of an AS4 message as the interchange it carries: inflated where it is compressed
//! (gzip, bounded), and taken out of Peppol's envelope where it is wrapped (an SBDH whose
//! business document is `TextContent` or, base64, `BinaryContent` of
//! `http://peppol.eu/xsd/ticc/envelope/1.0`); otherwise the attachment's bytes are the
//! interchange (`application/EDIFACT`, `text/plain`, `application/octet-stream`).

use std::io::Read as _;

use super::errors::{EbmsError, Refusal};
use super::ns;
use super::xml::Doc;
use crate::edifact::Charset;

/// Inflates a gzip payload; more than `max` bytes out is a decompression bomb, refused.
pub fn inflate(bytes: &[u8], max: usize, cid: &str) -> Result<Vec<u8>, Refusal> {
    let mut out = Vec::with_capacity(bytes.len().saturating_mul(4).min(max));
    let read = flate2::read::GzDecoder::new(bytes)
        .take((max as u64).saturating_add(1))
        .read_to_end(&mut out);
    match read {
        Ok(_) if out.len() > max => Err(Refusal::new(
            EbmsError::DecompressionFailure,
            format!("the payload cid:{cid} inflates past the {max} bytes --max-inflated leaves it"),
        )),
        Ok(_) => Ok(out),
        Err(e) => Err(Refusal::new(
            EbmsError::DecompressionFailure,
            format!("the payload cid:{cid} does not inflate: {e}"),
        )),
    }
}

/// The interchange a payload carries, by its `MimeType`: unwrapped from an SBDH's
/// `TextContent` or `BinaryContent` where it is XML, else the bytes themselves.
pub fn interchange(bytes: Vec<u8>, mime_type: Option<&str>, cid: &str) -> Result<Vec<u8>, Refusal> {
    let xml = mime_type.is_some_and(|m| {
        let m = m.to_ascii_lowercase();
        m == "application/xml" || m == "text/xml" || m.ends_with("+xml")
    });
    if !xml {
        return Ok(bytes);
    }
    let unreadable = |why: String| {
        Refusal::new(
            EbmsError::Other,
            format!(
                "the payload cid:{cid} is XML but not an SBDH with TextContent or BinaryContent: {why}"
            ),
        )
    };
    let text = std::str::from_utf8(&bytes).map_err(|e| unreadable(e.to_string()))?;
    let doc = Doc::parse(text).map_err(|e| unreadable(e.to_string()))?;
    let root = doc.root();
    if !doc.is(root, ns::SBDH, "StandardBusinessDocument") {
        return Err(unreadable(
            "its root is not a StandardBusinessDocument".into(),
        ));
    }
    if let Some(t) = doc.only_child(root, ns::PEPPOL_ENVELOPE, "TextContent") {
        let mut content = String::new();
        for &c in &doc.node(t).children {
            if let super::xml::Kind::Text(s) = &doc.node(c).kind {
                content.push_str(s);
            }
        }
        return Ok(text_bytes(&content));
    }
    if let Some(b) = doc.only_child(root, ns::PEPPOL_ENVELOPE, "BinaryContent") {
        use base64::Engine as _;
        let compact: String = doc
            .text(b)
            .chars()
            .filter(|c| !c.is_ascii_whitespace())
            .collect();
        return base64::engine::general_purpose::STANDARD
            .decode(compact)
            .map_err(|e| unreadable(format!("its BinaryContent is not base64: {e}")));
    }
    Err(unreadable(
        "it holds neither TextContent nor BinaryContent".into(),
    ))
}

/// The bytes of an interchange sent as XML text: in the repertoire its UNB names (UNOC as
/// ISO 8859-1, ...), so that it is the same interchange, byte for byte, as the file it was;
/// as UTF-8 where its text does not fit that repertoire (the parser then says what is wrong).
fn text_bytes(text: &str) -> Vec<u8> {
    let charset = Charset::for_syntax(&syntax_id(text));
    let encoded = charset.encode(text);
    if charset.decode(&encoded) == text {
        encoded.into_owned()
    } else {
        text.as_bytes().to_vec()
    }
}

/// The syntax identifier (UNB S001 0001) of an interchange's text, as far as it can be read.
fn syntax_id(text: &str) -> String {
    let text = text.trim_start();
    let (component, element, rest) = match text.strip_prefix("UNA") {
        Some(una) if una.chars().count() >= 6 => {
            let mut cs = una.chars();
            let component = cs.next().unwrap_or(':');
            let element = cs.next().unwrap_or('+');
            let skip: usize = una.chars().take(6).map(char::len_utf8).sum();
            (component, element, una[skip..].trim_start())
        }
        _ => (':', '+', text),
    };
    rest.strip_prefix("UNB")
        .and_then(|r| r.strip_prefix(element))
        .map(|r| {
            r.chars()
                .take_while(|&c| c != component && c != element)
                .take(4)
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gzip_bomb_is_refused_and_a_payload_inflated() {
        use std::io::Write as _;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(&vec![b'A'; 1_000_000]).unwrap();
        let bomb = gz.finish().unwrap();
        assert!(bomb.len() < 5_000);
        let e = inflate(&bomb, 100_000, "p").unwrap_err();
        assert_eq!(e.error, EbmsError::DecompressionFailure);
        assert_eq!(inflate(&bomb, 1_000_000, "p").unwrap().len(), 1_000_000);
        assert_eq!(
            inflate(b"not gzip", 100, "p").unwrap_err().error,
            EbmsError::DecompressionFailure
        );
    }

    #[test]
    fn peppol_envelopes_give_the_interchange_back_in_its_repertoire() {
        let sbdh = |inner: &str| {
            format!(
                r#"<sh:StandardBusinessDocument xmlns:sh="{}"><sh:StandardBusinessDocumentHeader/>{inner}</sh:StandardBusinessDocument>"#,
                ns::SBDH
            )
        };
        let text = sbdh(&format!(
            r#"<TextContent xmlns="{}" mimeType="application/EDIFACT">UNA:+.? 'UNB+UNOC:3+M&#xFC;LLER+HUB+240101:1200+R1'</TextContent>"#,
            ns::PEPPOL_ENVELOPE
        ));
        let got = interchange(text.into_bytes(), Some("application/xml"), "p").unwrap();
        assert_eq!(got, b"UNA:+.? 'UNB+UNOC:3+M\xfcLLER+HUB+240101:1200+R1'");
        let binary = sbdh(&format!(
            r#"<BinaryContent xmlns="{}" mimeType="application/EDIFACT">VU5CKw==</BinaryContent>"#,
            ns::PEPPOL_ENVELOPE
        ));
        assert_eq!(
            interchange(binary.into_bytes(), Some("application/xml"), "p").unwrap(),
            b"UNB+"
        );
        assert_eq!(
            interchange(b"UNB+UNOA:2".to_vec(), Some("application/EDIFACT"), "p").unwrap(),
            b"UNB+UNOA:2"
        );
        assert!(interchange(b"<x/>".to_vec(), Some("application/xml"), "p").is_err());
        // UTF-8 text under UNOY stays UTF-8; text that does not fit UNOA goes as UTF-8.
        assert_eq!(
            text_bytes("UNB+UNOY:4+\u{4e2d}"),
            "UNB+UNOY:4+\u{4e2d}".as_bytes()
        );
        assert_eq!(
            text_bytes("UNB+UNOA:2+\u{4e2d}"),
            "UNB+UNOA:2+\u{4e2d}".as_bytes()
        );
    }
}
