//! One AS2 request read and checked (RFC 4130): its AS2 headers, the partner it names, then its
//! S/MIME layers from the outside in (decrypt, inflate, verify, in whatever order the sender
//! nested them), the partner's requirements, the MIC the MDN returns, and the interchange it
//! carries. Nothing here touches the inbox.

use sha2::{Digest as _, Sha256};

use super::config::Config;
use super::entity::{self, Entity};
use super::mdn::{self, Requested};
use super::smime::{self, Digest, SmimeError};

/// How many S/MIME layers a message may nest, at most (encrypted, compressed, signed, and one
/// compression inside the signature, is four).
const MAX_LAYERS: usize = 6;

/// A message that passed every check.
#[derive(Debug)]
pub struct Received {
    pub requested: Requested,
    /// Where the MDN is wanted asynchronously (`Receipt-Delivery-Option`).
    pub receipt_delivery: Option<String>,
    /// `Received-Content-MIC`'s value.
    pub mic: String,
    /// The interchange.
    pub payload: Vec<u8>,
    /// The payload's file name (`Content-Disposition`), where the sender gave one.
    pub filename: Option<String>,
    /// SHA-256 of the payload, hex: the content a Message-ID is claimed with.
    pub content_sha256: String,
}

/// A message refused before its decision.
#[derive(Debug, Clone)]
pub struct Refused {
    /// What its MDN is addressed by, where the headers said enough to address one.
    pub requested: Option<Requested>,
    /// The disposition modifier (RFC 4130 7.4.3), or the HTTP error where no MDN can be made.
    pub modifier: &'static str,
    /// The HTTP status where no MDN answers it.
    pub status: Option<u16>,
    pub detail: String,
    pub message_id: Option<String>,
}

impl Refused {
    fn http(status: u16, modifier: &'static str, detail: impl Into<String>) -> Refused {
        Refused {
            requested: None,
            modifier,
            status: Some(status),
            detail: detail.into(),
            message_id: None,
        }
    }
}

/// Reads a request: `headers` the HTTP request's, `body` its body.
pub fn read(
    headers: &[(String, String)],
    body: &[u8],
    config: &Config,
    max_inflated: usize,
) -> Result<Received, Box<Refused>> {
    let top = Entity::with_headers(headers.to_vec(), body);
    let need = |name: &str| {
        top.header(name)
            .map(str::to_string)
            .filter(|v| !v.trim().is_empty())
            .ok_or_else(|| {
                Box::new(Refused::http(
                    400,
                    "malformed-request",
                    format!("the request has no {name} header: it is not an AS2 message"),
                ))
            })
    };
    let message_id = need("Message-ID")?;
    let message_id = message_id
        .trim()
        .trim_start_matches('<')
        .trim_end_matches('>')
        .to_string();
    if message_id.is_empty()
        || message_id.len() > 998
        || !message_id.bytes().all(|b| (0x21..0x7f).contains(&b))
    {
        return Err(Box::new(Refused::http(
            400,
            "malformed-request",
            "the Message-ID is empty, longer than 998 characters, or not printable ASCII",
        )));
    }
    let as2_from = mdn::unquote(&need("AS2-From")?);
    let as2_to = mdn::unquote(&need("AS2-To")?);
    let options = Requested::options(top.header("Disposition-Notification-Options"));
    let micalg = options.micalg;
    let mut requested = Requested {
        message_id: message_id.clone(),
        as2_from: as2_from.clone(),
        as2_to: as2_to.clone(),
        wanted: top.header("Disposition-Notification-To").is_some(),
        signed_with: options.signed_with,
        mic_digest: micalg.unwrap_or(Digest::Sha1),
    };
    let refuse = |requested: &Requested, modifier: &'static str, detail: String| {
        Box::new(Refused {
            requested: Some(requested.clone()),
            modifier,
            status: None,
            detail,
            message_id: Some(message_id.clone()),
        })
    };
    if as2_to != config.as2_id {
        return Err(refuse(
            &requested,
            "unknown-trading-partner",
            format!("the AS2-To {as2_to:?} is not this receiver's AS2 name"),
        ));
    }
    let Some(partner) = config.partner(&as2_from) else {
        return Err(refuse(
            &requested,
            "unknown-trading-partner",
            format!("the AS2-From {as2_from:?} is not a partner of --as2-config"),
        ));
    };
    // What the partner required of its MDN and cannot be done (RFC 4130 7.4.3): not applied,
    // and said by a `failed` MDN, so that the partner does not take the message as delivered.
    if let Some(code) = options.failure.filter(|_| requested.wanted) {
        let what = match code {
            "unsupported-format" => "a signed-receipt-protocol other than pkcs7-signature",
            _ => {
                "only signed-receipt-micalg digests this receiver does not support (it supports sha-1, sha-256, sha-384 and sha-512)"
            }
        };
        return Err(refuse(
            &requested,
            code,
            format!("the Disposition-Notification-Options require {what}"),
        ));
    }
    let receipt_delivery = top
        .header("Receipt-Delivery-Option")
        .map(|v| v.trim().to_string());

    // The layers, from the outside in; each one's bytes owned by `layer` in turn.
    let mut layer = Layer {
        headers: top.headers.clone(),
        bytes: body.to_vec(),
        body_at: 0,
    };
    let (mut signed, mut encrypted, mut compressed) = (false, false, false);
    // What the MIC is over (RFC 4130 7.3.1): the signed entity where there is a signature,
    // else the first decrypted entity, else the content itself.
    let mut mic_over: Option<(Vec<u8>, bool)> = None;
    let mut signature_digest: Option<Digest> = None;
    let broken = |requested: &Requested, e: entity::EntityError| {
        refuse(
            requested,
            "unexpected-processing-error",
            format!("the message's MIME structure is broken: {e}"),
        )
    };
    for _ in 0..MAX_LAYERS {
        let entity = layer.entity();
        let media = entity.media_type();
        let smime_type = entity
            .parameter("smime-type")
            .map(|t| t.to_ascii_lowercase())
            .unwrap_or_default();
        let next: Vec<u8> = if media == "application/pkcs7-mime"
            || media == "application/x-pkcs7-mime"
        {
            let der = entity.content().map_err(|e| broken(&requested, e))?;
            if smime_type == "signed-data" || smime_type == "certs-only" {
                return Err(refuse(
                    &requested,
                    "unexpected-processing-error",
                    format!(
                        "application/pkcs7-mime; smime-type={smime_type} is not supported: AS2 signs with multipart/signed (RFC 4130 5.2)"
                    ),
                ));
            }
            if smime_type == "compressed-data" {
                compressed = true;
                smime::decompress(&der, max_inflated).map_err(|e| match e {
                    SmimeError::TooLarge(_) => {
                        refuse(&requested, "decompression-failed", e.to_string())
                    }
                    _ => refuse(&requested, "decompression-failed", e.to_string()),
                })?
            } else {
                encrypted = true;
                let plain = smime::decrypt(&der, &config.key, &config.cert)
                    .map_err(|e| refuse(&requested, "decryption-failed", e.to_string()))?;
                if plain.len() > max_inflated {
                    return Err(refuse(
                        &requested,
                        "unexpected-processing-error",
                        format!(
                            "the decrypted message is larger than --max-inflated ({max_inflated} bytes)"
                        ),
                    ));
                }
                if mic_over.is_none() {
                    // The header block in canonical form; the content as it is (binary
                    // content is not text to canonicalise).
                    let body_at = Entity::parse(&plain)
                        .map(|e| plain.len() - e.body.len())
                        .unwrap_or(0);
                    let mut over = entity::canonical(&plain[..body_at]);
                    over.extend_from_slice(&plain[body_at..]);
                    mic_over = Some((over, false));
                }
                plain
            }
        } else if media == "multipart/signed" {
            let parts = entity.parts().map_err(|e| broken(&requested, e))?;
            let protocol = entity
                .parameter("protocol")
                .unwrap_or_default()
                .to_ascii_lowercase();
            if !protocol.is_empty() && !protocol.ends_with("pkcs7-signature") {
                return Err(refuse(
                    &requested,
                    "unexpected-processing-error",
                    format!("a multipart/signed with protocol {protocol:?} is not S/MIME"),
                ));
            }
            if parts.len() != 2 {
                return Err(refuse(
                    &requested,
                    "integrity-check-failed",
                    format!(
                        "a multipart/signed has {} parts, not the content and its signature",
                        parts.len()
                    ),
                ));
            }
            let signature = Entity::parse(parts[1]).map_err(|e| broken(&requested, e))?;
            let signature_der = signature.content().map_err(|e| broken(&requested, e))?;
            let content = parts[0];
            // As received first; else in canonical form, for a gateway that stored the text
            // with bare line feeds after it was signed canonical.
            let verified = match smime::verify(&signature_der, content, &partner.cert) {
                Ok(()) => content.to_vec(),
                Err(first) => {
                    let canonical = entity::canonical(content);
                    if canonical != content
                        && smime::verify(&signature_der, &canonical, &partner.cert).is_ok()
                    {
                        canonical
                    } else {
                        let modifier = match &first {
                            SmimeError::Signature(why)
                                if why.contains("signer certificate not found") =>
                            {
                                "authentication-failed"
                            }
                            _ => "integrity-check-failed",
                        };
                        return Err(refuse(
                            &requested,
                            modifier,
                            format!("{first} (the certificate --as2-config names for {as2_from})"),
                        ));
                    }
                }
            };
            signed = true;
            signature_digest = entity.parameter("micalg").and_then(|m| Digest::parse(&m));
            mic_over = Some((verified.clone(), true));
            verified
        } else {
            break;
        };
        let parsed = Entity::parse(&next).map_err(|e| broken(&requested, e))?;
        let (headers, body_at) = (parsed.headers, next.len() - parsed.body.len());
        layer = Layer {
            headers,
            bytes: next,
            body_at,
        };
    }
    let entity = layer.entity();
    let media = entity.media_type();
    if media.starts_with("application/pkcs7") || media == "multipart/signed" {
        return Err(refuse(
            &requested,
            "unexpected-processing-error",
            format!("the message nests more than {MAX_LAYERS} S/MIME layers"),
        ));
    }
    let unmet = [
        (partner.require_signed && !signed, "signed"),
        (partner.require_encrypted && !encrypted, "encrypted"),
        (partner.require_compressed && !compressed, "compressed"),
    ]
    .into_iter()
    .filter(|(unmet, _)| *unmet)
    .map(|(_, what)| what)
    .collect::<Vec<_>>();
    if !unmet.is_empty() {
        return Err(refuse(
            &requested,
            "insufficient-message-security",
            format!(
                "--as2-config requires {as2_from}'s messages to be {}, and this one is not",
                unmet.join(" and ")
            ),
        ));
    }
    let payload = entity.content().map_err(|e| broken(&requested, e))?;
    if payload.len() > max_inflated {
        return Err(refuse(
            &requested,
            "unexpected-processing-error",
            format!("the payload is larger than --max-inflated ({max_inflated} bytes)"),
        ));
    }
    if micalg.is_none()
        && let Some(d) = signature_digest
    {
        requested.mic_digest = d;
    }
    let mic = match &mic_over {
        Some((bytes, _)) => requested.mic_digest.mic(bytes),
        None => requested.mic_digest.mic(&payload),
    };
    let filename = entity
        .header("content-disposition")
        .and_then(|d| crate::as4::mime::parameter(d, "filename"));
    // Asked for with Disposition-Notification-To only: without it, no MDN goes anywhere.
    let receipt_delivery = receipt_delivery.filter(|_| requested.wanted);
    Ok(Received {
        requested,
        receipt_delivery,
        mic,
        content_sha256: hex::encode(Sha256::digest(&payload)),
        payload,
        filename,
    })
}

/// One layer's entity, its bytes owned.
struct Layer {
    headers: Vec<(String, String)>,
    bytes: Vec<u8>,
    body_at: usize,
}

impl Layer {
    fn entity(&self) -> Entity<'_> {
        Entity {
            headers: self.headers.clone(),
            raw: &self.bytes,
            body: &self.bytes[self.body_at..],
        }
    }
}
