//! The ebMS 3.0 header of a message posted to us: one `eb:UserMessage` (One-Way/Push), its ids,
//! parties, collaboration and the payloads it names.

use super::errors::{EbmsError, Refusal};
use super::ns;
use super::xml::Doc;

/// How long a value of the header (an id, a party, a service) may be: longer ones are refused
/// before anything is stored or said: a value is quoted in logs and errors.
const MAX_VALUE: usize = 512;

/// One payload the header names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartInfo {
    /// The attachment's `Content-ID` (`href="cid:..."`); `None` for the SOAP Body.
    pub cid: Option<String>,
    /// `MimeType` of its part properties.
    pub mime_type: Option<String>,
    /// `CompressionType` (`application/gzip`), where it is compressed.
    pub compression: Option<String>,
}

/// The `eb:UserMessage` of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserMessage {
    pub message_id: String,
    pub timestamp: String,
    pub conversation_id: String,
    pub from: String,
    pub to: String,
    pub service: String,
    pub action: String,
    pub parts: Vec<PartInfo>,
}

fn invalid(detail: impl Into<String>) -> Refusal {
    Refusal::new(EbmsError::InvalidHeader, detail)
}

/// The text of the one `ns`:`local` child of `n`, trimmed, within [`MAX_VALUE`] bytes and
/// without control characters; an error names it.
fn text_of(doc: &Doc, n: usize, local: &str) -> Result<String, Refusal> {
    let text = doc
        .only_child(n, ns::EBMS, local)
        .map(|c| doc.text(c))
        .filter(|t| !t.is_empty())
        .ok_or_else(|| invalid(format!("eb:{local} is missing, empty or repeated")))?;
    if !plain(&text) {
        return Err(invalid(format!(
            "eb:{local} is longer than {MAX_VALUE} bytes or holds control characters"
        )));
    }
    Ok(text)
}

/// Within [`MAX_VALUE`] bytes, and no control character.
fn plain(text: &str) -> bool {
    text.len() <= MAX_VALUE && !text.chars().any(char::is_control)
}

/// True where `text` is an `xs:dateTime` a database takes as it is (years 1 to 9999, a day
/// the month has, an offset of at most 14 hours): ebMS's `eb:Timestamp`, which is kept with
/// each delivery.
pub fn is_date_time(text: &str) -> bool {
    let b = text.as_bytes();
    let digits = |from: usize, n: usize| -> Option<u32> {
        let part = b.get(from..from + n)?;
        part.iter()
            .all(u8::is_ascii_digit)
            .then(|| part.iter().fold(0, |v, d| v * 10 + u32::from(d - b'0')))
    };
    let at = |i: usize, c: u8| b.get(i) == Some(&c);
    let (Some(year), Some(month), Some(day), Some(hour), Some(minute), Some(second)) = (
        digits(0, 4),
        digits(5, 2),
        digits(8, 2),
        digits(11, 2),
        digits(14, 2),
        digits(17, 2),
    ) else {
        return false;
    };
    if !(at(4, b'-') && at(7, b'-') && at(10, b'T') && at(13, b':') && at(16, b':')) {
        return false;
    }
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    if year == 0 || day == 0 || day > days || hour > 23 || minute > 59 || second > 59 {
        return false;
    }
    let mut i = 19;
    if at(i, b'.') {
        let fraction = b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if fraction == 0 || fraction > 9 {
            return false;
        }
        i += 1 + fraction;
    }
    match b.get(i) {
        None => true,
        Some(b'Z') => i + 1 == b.len(),
        Some(b'+' | b'-') => {
            i + 6 == b.len()
                && at(i + 3, b':')
                && digits(i + 1, 2).is_some_and(|h| h <= 14)
                && digits(i + 4, 2).is_some_and(|m| m <= 59)
        }
        Some(_) => false,
    }
}

/// Reads the `eb:UserMessage` of `messaging`.
pub fn user_message(doc: &Doc, messaging: usize) -> Result<UserMessage, Refusal> {
    if doc
        .children_named(messaging, ns::EBMS, "SignalMessage")
        .next()
        .is_some()
    {
        return Err(Refusal::new(
            EbmsError::ValueNotRecognized,
            "a signal message was posted: this receiver takes user messages (One-Way/Push)",
        ));
    }
    let um = doc
        .only_child(messaging, ns::EBMS, "UserMessage")
        .ok_or_else(|| invalid("eb:Messaging holds no one eb:UserMessage"))?;
    let info = doc
        .only_child(um, ns::EBMS, "MessageInfo")
        .ok_or_else(|| invalid("eb:MessageInfo is missing"))?;
    let message_id = text_of(doc, info, "MessageId")?;
    let timestamp = text_of(doc, info, "Timestamp")?;
    if !is_date_time(&timestamp) {
        return Err(invalid(format!(
            "eb:Timestamp {timestamp:?} is not an xs:dateTime"
        )));
    }
    let party_info = doc
        .only_child(um, ns::EBMS, "PartyInfo")
        .ok_or_else(|| invalid("eb:PartyInfo is missing"))?;
    let party = |side: &str| -> Result<String, Refusal> {
        let n = doc
            .only_child(party_info, ns::EBMS, side)
            .ok_or_else(|| invalid(format!("eb:{side} is missing")))?;
        text_of(doc, n, "PartyId")
    };
    let from = party("From")?;
    let to = party("To")?;
    let collaboration = doc
        .only_child(um, ns::EBMS, "CollaborationInfo")
        .ok_or_else(|| invalid("eb:CollaborationInfo is missing"))?;
    let service = text_of(doc, collaboration, "Service")?;
    let action = text_of(doc, collaboration, "Action")?;
    let conversation_id = text_of(doc, collaboration, "ConversationId")?;
    let mut parts = Vec::new();
    if let Some(payload_info) = doc.only_child(um, ns::EBMS, "PayloadInfo") {
        for pi in doc.children_named(payload_info, ns::EBMS, "PartInfo") {
            let cid = match doc.attr(pi, "", "href") {
                None => None,
                Some(h) if !plain(h) => {
                    return Err(invalid(format!(
                        "a payload's href is longer than {MAX_VALUE} bytes or holds control characters"
                    )));
                }
                Some(h) => Some(
                    h.strip_prefix("cid:")
                        .filter(|c| !c.is_empty())
                        .map(content_id)
                        .ok_or_else(|| {
                            Refusal::new(
                                EbmsError::ValueNotRecognized,
                                format!("a payload's href {h:?} is not a cid: of this message"),
                            )
                        })?,
                ),
            };
            let property = |name: &str| {
                doc.only_child(pi, ns::EBMS, "PartProperties")
                    .and_then(|pp| {
                        doc.children_named(pp, ns::EBMS, "Property")
                            .find(|&p| doc.attr(p, "", "name") == Some(name))
                            .map(|p| doc.text(p))
                    })
                    .filter(|v| plain(v))
            };
            parts.push(PartInfo {
                cid,
                mime_type: property("MimeType"),
                compression: property("CompressionType"),
            });
        }
    }
    Ok(UserMessage {
        message_id,
        timestamp,
        conversation_id,
        from,
        to,
        service,
        action,
        parts,
    })
}

/// The `Content-ID` a `cid:` URL names: its `%XX` escapes decoded (RFC 2392); one that does
/// not decode to UTF-8 is kept as written.
pub fn content_id(url: &str) -> String {
    if !url.contains('%') {
        return url.to_string();
    }
    let b = url.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| url.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_xs_date_times_a_database_takes() {
        for good in [
            "2026-12-02T07:15:14Z",
            "2026-12-02T07:15:14.123Z",
            "2024-02-29T00:00:00+14:00",
            "2026-12-02T07:15:14",
            "0001-01-01T00:00:00-01:30",
        ] {
            assert!(is_date_time(good), "{good}");
        }
        for bad in [
            "",
            "2026-12-02",
            "2026-12-02 07:15:14Z",
            "2025-02-29T00:00:00Z",
            "2026-04-31T00:00:00Z",
            "0000-01-01T00:00:00Z",
            "10000-01-01T00:00:00Z",
            "2026-13-01T00:00:00Z",
            "2026-12-02T24:00:00Z",
            "2026-12-02T07:60:00Z",
            "2026-12-02T07:15:60Z",
            "2026-12-02T07:15:14.Z",
            "2026-12-02T07:15:14+15:00",
            "2026-12-02T07:15:14Zjunk",
            "2026-12-02T07:15:14+0100",
            "２０２６-12-02T07:15:14Z",
        ] {
            assert!(!is_date_time(bad), "{bad}");
        }
    }

    #[test]
    fn a_cid_url_names_its_content_id_decoded() {
        assert_eq!(content_id("part1@example.com"), "part1@example.com");
        assert_eq!(content_id("a%40b%2Fc"), "a@b/c");
        assert_eq!(content_id("100%"), "100%");
        assert_eq!(content_id("%ff"), "%ff");
    }
}
