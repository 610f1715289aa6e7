//! The body of an AS4 request: SOAP with attachments, `multipart/related` (RFC 2387) with the
//! SOAP envelope as its root part and each payload a part named by its `Content-ID`; or the
//! envelope alone (`application/soap+xml`). Every part is kept as bytes; limits on the number
//! of parts and the size of their headers bound what a hostile sender can make it hold.

/// How many parts one message may have, at most.
pub const MAX_PARTS: usize = 64;

/// How long one part's headers may be, at most.
const MAX_HEADERS: usize = 16 * 1024;

/// One part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// Its `Content-ID`, without the angle brackets.
    pub content_id: Option<String>,
    /// Its `Content-Type`, as given (`application/octet-stream` where none is).
    pub content_type: String,
    pub body: Vec<u8>,
}

/// The parts of a request, the root (the SOAP envelope) first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub parts: Vec<Part>,
}

/// Why a body was not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MimeError {
    #[error(
        "the request's Content-Type is {0:?}: an AS4 message is multipart/related or application/soap+xml"
    )]
    ContentType(String),
    #[error("the multipart/related Content-Type names no boundary")]
    NoBoundary,
    #[error("the body has no part delimited by its boundary")]
    NoParts,
    #[error("the body ends inside a part (no closing boundary)")]
    Unterminated,
    #[error("a part's headers are longer than {MAX_HEADERS} bytes, or never end")]
    Headers,
    #[error("the body has more than {MAX_PARTS} parts")]
    TooManyParts,
    #[error("the root part named by start={0:?} is not in the body")]
    NoRoot(String),
    #[error("a part's base64 content does not decode")]
    Base64,
}

/// The value of parameter `name` in a header value (`type/sub; a=b; c="d"`), unquoted.
pub fn parameter(value: &str, name: &str) -> Option<String> {
    let mut rest = value.split_once(';')?.1;
    loop {
        rest = rest.trim_start_matches([' ', '\t', ';']);
        if rest.is_empty() {
            return None;
        }
        let (key, after) = rest.split_once('=')?;
        let key = key.trim();
        let after = after.trim_start();
        let (val, next) = if let Some(quoted) = after.strip_prefix('"') {
            // A quoted string, with backslash escapes.
            let mut val = String::new();
            let mut chars = quoted.char_indices();
            let mut end = quoted.len();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        if let Some((_, n)) = chars.next() {
                            val.push(n);
                        }
                    }
                    '"' => {
                        end = i + 1;
                        break;
                    }
                    c => val.push(c),
                }
            }
            (val, &quoted[end.min(quoted.len())..])
        } else {
            let end = after.find(';').unwrap_or(after.len());
            (after[..end].trim().to_string(), &after[end..])
        };
        if key.eq_ignore_ascii_case(name) {
            return Some(val);
        }
        rest = next;
    }
}

/// The media type of a header value, lower-cased, without its parameters.
pub fn media_type(value: &str) -> String {
    value
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// Reads a request's body by its `Content-Type`.
pub fn read(content_type: &str, body: &[u8]) -> Result<Message, MimeError> {
    match media_type(content_type).as_str() {
        "application/soap+xml" => Ok(Message {
            parts: vec![Part {
                content_id: None,
                content_type: content_type.to_string(),
                body: body.to_vec(),
            }],
        }),
        "multipart/related" => {
            let boundary = parameter(content_type, "boundary")
                .filter(|b| !b.is_empty() && b.len() <= 200)
                .ok_or(MimeError::NoBoundary)?;
            let mut parts = split(body, boundary.as_bytes())?;
            if let Some(start) = parameter(content_type, "start") {
                let id = unbracket(&start);
                let root = parts
                    .iter()
                    .position(|p| p.content_id.as_deref() == Some(id))
                    .ok_or_else(|| MimeError::NoRoot(id.to_string()))?;
                let root = parts.remove(root);
                parts.insert(0, root);
            }
            Ok(Message { parts })
        }
        _ => Err(MimeError::ContentType(
            content_type.chars().take(100).collect(),
        )),
    }
}

fn unbracket(id: &str) -> &str {
    let id = id.trim();
    id.strip_prefix('<')
        .and_then(|i| i.strip_suffix('>'))
        .unwrap_or(id)
}

/// The position of `needle` in `hay` from `from` on.
fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    if needle.is_empty() || from > hay.len() {
        return None;
    }
    hay[from..]
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}

/// The parts between `--boundary` lines.
fn split(body: &[u8], boundary: &[u8]) -> Result<Vec<Part>, MimeError> {
    let mut delimiter = b"--".to_vec();
    delimiter.extend_from_slice(boundary);
    // The first delimiter: at the start of the body, or after a preamble's line end.
    let first = if body.starts_with(&delimiter) {
        0
    } else {
        let mut with_crlf = b"\r\n".to_vec();
        with_crlf.extend_from_slice(&delimiter);
        find(body, &with_crlf, 0).ok_or(MimeError::NoParts)? + 2
    };
    let mut next_delimiter = b"\r\n".to_vec();
    next_delimiter.extend_from_slice(&delimiter);
    let mut at = first + delimiter.len();
    let mut parts = Vec::new();
    loop {
        // After a delimiter: `--` ends the body; otherwise the rest of the line is ignored
        // (transport padding) and the part begins.
        if body[at..].starts_with(b"--") {
            break;
        }
        let line_end = find(body, b"\r\n", at).ok_or(MimeError::Unterminated)?;
        let start = line_end + 2;
        let end = find(body, &next_delimiter, start).ok_or(MimeError::Unterminated)?;
        if parts.len() == MAX_PARTS {
            return Err(MimeError::TooManyParts);
        }
        parts.push(part(&body[start..end])?);
        at = end + next_delimiter.len();
    }
    if parts.is_empty() {
        return Err(MimeError::NoParts);
    }
    Ok(parts)
}

/// One part: its headers, an empty line, its content.
fn part(bytes: &[u8]) -> Result<Part, MimeError> {
    let (head, content) = if bytes.starts_with(b"\r\n") {
        (&bytes[..0], &bytes[2..])
    } else {
        let split = find(bytes, b"\r\n\r\n", 0)
            .filter(|&s| s <= MAX_HEADERS)
            .ok_or(MimeError::Headers)?;
        (&bytes[..split], &bytes[split + 4..])
    };
    let head = String::from_utf8_lossy(head);
    let mut content_id = None;
    let mut content_type = "application/octet-stream".to_string();
    let mut encoding = String::new();
    // Header lines, folded continuation lines joined.
    let mut lines: Vec<String> = Vec::new();
    for line in head.split("\r\n") {
        if line.starts_with([' ', '\t']) {
            if let Some(last) = lines.last_mut() {
                last.push(' ');
                last.push_str(line.trim());
            }
        } else {
            lines.push(line.to_string());
        }
    }
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "content-id" => content_id = Some(unbracket(value).to_string()),
            "content-type" => content_type = value.to_string(),
            "content-transfer-encoding" => encoding = value.to_ascii_lowercase(),
            _ => {}
        }
    }
    let body = if encoding == "base64" {
        use base64::Engine as _;
        let compact: Vec<u8> = content
            .iter()
            .copied()
            .filter(|b| !b.is_ascii_whitespace())
            .collect();
        base64::engine::general_purpose::STANDARD
            .decode(compact)
            .map_err(|_| MimeError::Base64)?
    } else {
        content.to_vec()
    };
    Ok(Part {
        content_id,
        content_type,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TYPE: &str =
        r#"multipart/related; type="application/soap+xml"; boundary="b1"; start="<root@x>""#;

    #[test]
    fn parts_are_read_by_their_boundary_the_root_first() {
        let body = b"preamble\r\n--b1\r\nContent-Type: application/octet-stream\r\nContent-ID: <att@x>\r\n\r\n\x00\x01\r\n--\r\n--b1  \r\nContent-Type: application/soap+xml\r\nContent-ID:\r\n <root@x>\r\n\r\n<e/>\r\n--b1--\r\nepilogue";
        let m = read(TYPE, body).unwrap();
        assert_eq!(m.parts.len(), 2);
        assert_eq!(m.parts[0].content_id.as_deref(), Some("root@x"));
        assert_eq!(m.parts[0].body, b"<e/>");
        assert_eq!(
            m.parts[1].body, b"\x00\x01\r\n--",
            "binary content kept whole"
        );
        assert_eq!(
            parameter(TYPE, "type").as_deref(),
            Some("application/soap+xml")
        );
    }

    #[test]
    fn broken_bodies_are_refused() {
        assert_eq!(
            read("text/plain", b""),
            Err(MimeError::ContentType("text/plain".into()))
        );
        assert_eq!(read("multipart/related", b""), Err(MimeError::NoBoundary));
        assert_eq!(read(TYPE, b"nothing"), Err(MimeError::NoParts));
        assert_eq!(
            read(TYPE, b"--b1\r\nContent-ID: <root@x>\r\n\r\n<e/>"),
            Err(MimeError::Unterminated)
        );
        let many: Vec<u8> = (0..=MAX_PARTS)
            .flat_map(|_| b"--b1\r\n\r\nx\r\n".to_vec())
            .chain(b"--b1--".to_vec())
            .collect();
        assert_eq!(
            read("multipart/related; boundary=b1", &many),
            Err(MimeError::TooManyParts)
        );
        assert_eq!(
            read(TYPE, b"--b1\r\nContent-ID: <other@x>\r\n\r\n<e/>\r\n--b1--"),
            Err(MimeError::NoRoot("root@x".into()))
        );
    }
}
