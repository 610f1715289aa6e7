//! The ebMS 3.0 header of a message posted to us: one `eb:UserMessage` (One-Way/Push), its ids,
//! parties, collaboration and the payloads it names.

use super::errors::{EbmsError, Refusal};
use super::ns;
use super::xml::Doc;

/// How long a message id may be: longer ones are refused before anything is stored.
const MAX_ID: usize = 512;

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

/// The text of the one `ns`:`local` child of `n`, trimmed; an error names it.
fn text_of(doc: &Doc, n: usize, local: &str) -> Result<String, Refusal> {
    doc.only_child(n, ns::EBMS, local)
        .map(|c| doc.text(c))
        .filter(|t| !t.is_empty())
        .ok_or_else(|| invalid(format!("eb:{local} is missing, empty or repeated")))
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
    if message_id.len() > MAX_ID || message_id.chars().any(char::is_control) {
        return Err(invalid(
            "eb:MessageId is longer than 512 bytes or holds control characters",
        ));
    }
    let timestamp = text_of(doc, info, "Timestamp")?;
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
                Some(h) => Some(
                    h.strip_prefix("cid:")
                        .filter(|c| !c.is_empty())
                        .ok_or_else(|| {
                            Refusal::new(
                                EbmsError::ValueNotRecognized,
                                format!("a payload's href {h:?} is not a cid: of this message"),
                            )
                        })?
                        .to_string(),
                ),
            };
            let property = |name: &str| {
                doc.only_child(pi, ns::EBMS, "PartProperties")
                    .and_then(|pp| {
                        doc.children_named(pp, ns::EBMS, "Property")
                            .find(|&p| doc.attr(p, "", "name") == Some(name))
                            .map(|p| doc.text(p))
                    })
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
