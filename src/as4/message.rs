//! One request, read and checked in order: the MIME parts, the SOAP envelope, the ebMS header,
//! the partner it claims to come from, the security (decrypt, then verify), and each payload's
//! interchange. Nothing here touches the inbox: a message that passes is what the decision takes.

use super::config::Config;
use super::ebms::{self, UserMessage};
use super::errors::{EbmsError, Refusal};
use super::mime;
use super::payload;
use super::wss;
use super::xml::Doc;
use sha2::{Digest as _, Sha256};

/// A message that passed every check.
#[derive(Debug)]
pub struct Received {
    pub message: UserMessage,
    /// Each payload's interchange bytes, with the `Content-ID` of its part, in the header's order.
    pub interchanges: Vec<(String, Vec<u8>)>,
    /// The signature's references, in canonical form, for the receipt.
    pub references: Vec<Vec<u8>>,
    /// A SHA-256 over its payloads' interchanges, in order (hex): a message sent again carries
    /// the same, whatever its encryption.
    pub content_sha256: String,
}

/// A message refused, and its id where it could be read (for the error's `RefToMessageId`).
#[derive(Debug)]
pub struct Rejected {
    pub refusal: Refusal,
    pub message_id: Option<String>,
}

/// Reads and checks a request's body (of `content_type`) for `config`; `max_inflated` bounds
/// all of its payloads together once inflated.
pub fn read(
    content_type: &str,
    body: &[u8],
    config: &Config,
    max_inflated: usize,
) -> Result<Received, Rejected> {
    let early = |refusal: Refusal| Rejected {
        refusal,
        message_id: None,
    };
    let parts = mime::read(content_type, body)
        .map_err(|e| early(Refusal::new(EbmsError::InvalidHeader, e.to_string())))?
        .parts;
    let soap = std::str::from_utf8(&parts[0].body).map_err(|_| {
        early(Refusal::new(
            EbmsError::InvalidHeader,
            "the SOAP part is not UTF-8",
        ))
    })?;
    let doc = Doc::parse(soap).map_err(|e| {
        early(Refusal::new(
            EbmsError::InvalidHeader,
            format!("the SOAP part: {e}"),
        ))
    })?;
    let env = wss::envelope(&doc).map_err(early)?;
    let message = ebms::user_message(&doc, env.messaging).map_err(early)?;
    let id = message.message_id.clone();
    let late = |refusal: Refusal| Rejected {
        refusal,
        message_id: Some(id.clone()),
    };
    if message.to != config.party_id {
        return Err(late(Refusal::new(
            EbmsError::ValueInconsistent,
            format!(
                "the message is addressed to {}, and this receiver is {}",
                message.to, config.party_id
            ),
        )));
    }
    let partner = config
        .keys
        .partners
        .iter()
        .find(|p| p.party_id == message.from)
        .ok_or_else(|| {
            late(Refusal::new(
                EbmsError::FailedAuthentication,
                format!("{} is not a partner of this receiver", message.from),
            ))
        })?;
    if message.parts.is_empty() {
        return Err(late(Refusal::new(
            EbmsError::Other,
            "the message names no payload",
        )));
    }
    let mut cids = Vec::with_capacity(message.parts.len());
    for p in &message.parts {
        match &p.cid {
            Some(cid) if parts.iter().any(|q| q.content_id.as_deref() == Some(cid)) => {
                cids.push(cid.clone());
            }
            Some(cid) => {
                return Err(late(Refusal::new(
                    EbmsError::ValueInconsistent,
                    format!("the payload cid:{cid} is not in the message"),
                )));
            }
            None => {
                return Err(late(Refusal::new(
                    EbmsError::Other,
                    "a payload in the SOAP Body is not taken: attachments only",
                )));
            }
        }
    }
    let secured = wss::check(&doc, env, &parts, &config.keys, partner, &cids).map_err(late)?;
    let mut interchanges = Vec::with_capacity(cids.len());
    // One bound for the message's payloads together: a message of many payloads, each within
    // it, would otherwise take many times the memory.
    let mut inflatable = max_inflated;
    for (p, cid) in message.parts.iter().zip(cids) {
        let Some(bytes) = secured.attachments.get(&cid) else {
            return Err(late(Refusal::new(
                EbmsError::PolicyNoncompliance,
                format!("the payload cid:{cid} is not encrypted"),
            )));
        };
        let bytes = match p.compression.as_deref() {
            None => bytes.clone(),
            Some(c) if c.eq_ignore_ascii_case("application/gzip") => {
                let inflated = payload::inflate(bytes, inflatable, &cid).map_err(late)?;
                inflatable -= inflated.len();
                inflated
            }
            Some(other) => {
                return Err(late(Refusal::new(
                    EbmsError::DecompressionFailure,
                    format!(
                        "the payload cid:{cid} is compressed with {other}: only application/gzip is taken"
                    ),
                )));
            }
        };
        let interchange =
            payload::interchange(bytes, p.mime_type.as_deref(), &cid).map_err(late)?;
        interchanges.push((cid, interchange));
    }
    let mut content = Sha256::new();
    for (_, bytes) in &interchanges {
        content.update((bytes.len() as u64).to_be_bytes());
        content.update(bytes);
    }
    Ok(Received {
        message,
        interchanges,
        references: secured.references,
        content_sha256: hex::encode(content.finalize()),
    })
}
