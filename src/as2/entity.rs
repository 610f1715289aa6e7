//! MIME entities as AS2 carries them (RFC 2045, 1847, 5751): a header block, an empty line, a
//! body. The bytes of each part of a `multipart/signed` are kept exactly as they arrived, since
//! the signature and the MIC are over them. Lines end in CRLF on the wire; a bare LF is
//! tolerated in headers (some senders' libraries write them), never rewritten in a body.

/// How long a header block may be, at most: a hostile sender cannot make it hold more.
pub const MAX_HEADERS: usize = 16 * 1024;

/// How many parts a multipart body may have, at most (a signature has two).
const MAX_PARTS: usize = 16;

/// One entity: its headers (names as given, values unfolded and trimmed) and its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entity<'a> {
    pub headers: Vec<(String, String)>,
    /// The whole entity as received: headers, empty line and body.
    pub raw: &'a [u8],
    /// The body, before its transfer encoding is undone.
    pub body: &'a [u8],
}

/// Why an entity was not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntityError {
    #[error("a MIME header block is longer than {MAX_HEADERS} bytes, or never ends")]
    Headers,
    #[error("the multipart Content-Type {0:?} names no boundary")]
    NoBoundary(String),
    #[error("the multipart body has no part delimited by its boundary")]
    NoParts,
    #[error("the multipart body ends inside a part (no closing boundary)")]
    Unterminated,
    #[error("the multipart body has more than {MAX_PARTS} parts")]
    TooManyParts,
    #[error("the base64 content of a {0} part does not decode")]
    Base64(String),
    #[error("the Content-Transfer-Encoding {0:?} is not supported (binary, 7bit, 8bit, base64)")]
    Encoding(String),
}

impl<'a> Entity<'a> {
    /// Reads `raw`: headers up to the first empty line (CRLF CRLF, or LF LF), then the body.
    pub fn parse(raw: &'a [u8]) -> Result<Entity<'a>, EntityError> {
        let (head, body) = split_head(raw)?;
        Ok(Entity {
            headers: headers(head),
            raw,
            body,
        })
    }

    /// An entity whose headers came apart from its body (an HTTP request's).
    pub fn with_headers(headers: Vec<(String, String)>, body: &'a [u8]) -> Entity<'a> {
        Entity {
            headers,
            raw: body,
            body,
        }
    }

    /// The value of header `name` (the first, any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The `Content-Type`, as given (`text/plain` where none is, as RFC 2045 says).
    pub fn content_type(&self) -> &str {
        self.header("content-type").unwrap_or("text/plain")
    }

    /// The media type, lower-cased, without parameters.
    pub fn media_type(&self) -> String {
        crate::as4::mime::media_type(self.content_type())
    }

    /// A parameter of the `Content-Type`, lower-cased where `lower`.
    pub fn parameter(&self, name: &str) -> Option<String> {
        crate::as4::mime::parameter(self.content_type(), name)
    }

    /// The body with its transfer encoding undone.
    pub fn content(&self) -> Result<Vec<u8>, EntityError> {
        let encoding = self
            .header("content-transfer-encoding")
            .unwrap_or("binary")
            .trim()
            .to_ascii_lowercase();
        match encoding.as_str() {
            "binary" | "7bit" | "8bit" => Ok(self.body.to_vec()),
            "base64" => {
                use base64::Engine as _;
                let compact: Vec<u8> = self
                    .body
                    .iter()
                    .copied()
                    .filter(|b| !b.is_ascii_whitespace())
                    .collect();
                base64::engine::general_purpose::STANDARD
                    .decode(compact)
                    .map_err(|_| EntityError::Base64(self.media_type()))
            }
            other => Err(EntityError::Encoding(other.chars().take(40).collect())),
        }
    }

    /// The parts of a multipart body, each exactly as it arrived between its delimiters.
    pub fn parts(&self) -> Result<Vec<&'a [u8]>, EntityError> {
        let boundary = self
            .parameter("boundary")
            .filter(|b| !b.is_empty() && b.len() <= 200)
            .ok_or_else(|| {
                EntityError::NoBoundary(self.content_type().chars().take(100).collect())
            })?;
        split(self.body, boundary.as_bytes())
    }
}

/// The header block and the body of `raw`.
fn split_head(raw: &[u8]) -> Result<(&[u8], &[u8]), EntityError> {
    // No headers at all: the body starts after the empty line.
    if raw.starts_with(b"\r\n") {
        return Ok((&[], &raw[2..]));
    }
    if raw.starts_with(b"\n") {
        return Ok((&[], &raw[1..]));
    }
    let window = &raw[..raw.len().min(MAX_HEADERS + 4)];
    let crlf = find(window, b"\r\n\r\n", 0).map(|p| (p, 4));
    let lf = find(window, b"\n\n", 0).map(|p| (p, 2));
    let (at, len) = match (crlf, lf) {
        (Some(a), Some(b)) => {
            if a.0 < b.0 {
                a
            } else {
                b
            }
        }
        (Some(a), None) => a,
        (None, Some(b)) => b,
        (None, None) => return Err(EntityError::Headers),
    };
    Ok((&raw[..at], &raw[at + len..]))
}

/// Header lines, folded continuation lines joined.
fn headers(head: &[u8]) -> Vec<(String, String)> {
    let text = String::from_utf8_lossy(head);
    let mut lines: Vec<String> = Vec::new();
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.starts_with([' ', '\t']) {
            if let Some(last) = lines.last_mut() {
                last.push(' ');
                last.push_str(line.trim());
            }
        } else if !line.is_empty() {
            lines.push(line.to_string());
        }
    }
    lines
        .into_iter()
        .filter_map(|l| {
            let (name, value) = l.split_once(':')?;
            Some((name.trim().to_string(), value.trim().to_string()))
        })
        .collect()
}

/// The position of `needle` in `hay` from `from` on.
pub fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    if needle.is_empty() || from > hay.len() {
        return None;
    }
    memchr::memmem::find(&hay[from..], needle).map(|p| p + from)
}

/// The parts between `--boundary` lines (RFC 2046 5.1.1): the CRLF before a delimiter belongs
/// to it, not to the part.
fn split<'a>(body: &'a [u8], boundary: &[u8]) -> Result<Vec<&'a [u8]>, EntityError> {
    let mut delimiter = b"--".to_vec();
    delimiter.extend_from_slice(boundary);
    let first = if body.starts_with(&delimiter) {
        0
    } else {
        let mut with_lf = b"\n".to_vec();
        with_lf.extend_from_slice(&delimiter);
        find(body, &with_lf, 0).ok_or(EntityError::NoParts)? + 1
    };
    let mut next = b"\n".to_vec();
    next.extend_from_slice(&delimiter);
    let mut at = first + delimiter.len();
    let mut parts = Vec::new();
    loop {
        if body[at..].starts_with(b"--") {
            break;
        }
        // The rest of the delimiter's line is transport padding.
        let line_end = find(body, b"\n", at).ok_or(EntityError::Unterminated)?;
        let start = line_end + 1;
        let end = find(body, &next, start).ok_or(EntityError::Unterminated)?;
        if parts.len() == MAX_PARTS {
            return Err(EntityError::TooManyParts);
        }
        // The line break before the delimiter: CRLF, or a bare LF.
        let part_end = if end > start && body[end - 1] == b'\r' {
            end - 1
        } else {
            end
        };
        parts.push(&body[start..part_end.max(start)]);
        at = end + next.len();
    }
    if parts.is_empty() {
        return Err(EntityError::NoParts);
    }
    Ok(parts)
}

/// `bytes` in canonical form (RFC 5751 3.1.1): every line break CRLF. For text that a sender
/// signed canonical and a gateway stored with bare LFs.
pub fn canonical(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() + bytes.len() / 32);
    let mut previous = 0u8;
    for &b in bytes {
        if b == b'\n' && previous != b'\r' {
            out.push(b'\r');
        }
        out.push(b);
        previous = b;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entity_splits_into_unfolded_headers_and_its_body() {
        let raw = b"Content-Type: multipart/signed;\r\n\tprotocol=\"application/pkcs7-signature\"; boundary=\"b\"\r\nX: 1\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\nhi\r\n--b\r\nContent-Type: application/pkcs7-signature\r\nContent-Transfer-Encoding: base64\r\n\r\naGk=\r\n--b--\r\n";
        let e = Entity::parse(raw).unwrap();
        assert_eq!(e.media_type(), "multipart/signed");
        assert_eq!(
            e.parameter("protocol").as_deref(),
            Some("application/pkcs7-signature")
        );
        let parts = e.parts().unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0], b"Content-Type: text/plain\r\n\r\nhi");
        let sig = Entity::parse(parts[1]).unwrap();
        assert_eq!(sig.content().unwrap(), b"hi");
        assert_eq!(e.header("x"), Some("1"));
    }

    #[test]
    fn broken_entities_say_why() {
        assert_eq!(Entity::parse(b"X: 1").unwrap_err(), EntityError::Headers);
        let e = Entity::parse(b"Content-Type: multipart/signed\r\n\r\n--b\r\n").unwrap();
        assert!(matches!(e.parts(), Err(EntityError::NoBoundary(_))));
        let e =
            Entity::parse(b"Content-Type: multipart/signed; boundary=b\r\n\r\n--b\r\nx").unwrap();
        assert_eq!(e.parts().unwrap_err(), EntityError::Unterminated);
        let e = Entity::parse(b"Content-Type: multipart/signed; boundary=b\r\n\r\nnone").unwrap();
        assert_eq!(e.parts().unwrap_err(), EntityError::NoParts);
        let e = Entity::parse(b"Content-Transfer-Encoding: quoted-printable\r\n\r\nx").unwrap();
        assert!(matches!(e.content(), Err(EntityError::Encoding(_))));
        let e = Entity::parse(b"Content-Transfer-Encoding: base64\r\n\r\n!!").unwrap();
        assert!(matches!(e.content(), Err(EntityError::Base64(_))));
    }

    #[test]
    fn canonical_form_turns_bare_line_feeds_into_crlf_only() {
        assert_eq!(canonical(b"a\nb\r\nc\n"), b"a\r\nb\r\nc\r\n");
    }
}
