//! WS-Security of an AS4 message, the eDelivery AS4 1.x / Peppol algorithm set: the payloads
//! decrypted (AES-128-GCM under a key wrapped with RSA-OAEP and MGF1-SHA256 for our
//! certificate), then the signature checked (RSA-SHA256 over the exclusive canonical form of
//! `SignedInfo`, by the sender's pinned certificate, its references digested with SHA-256: the
//! `eb:Messaging` header, the Body and every attachment's content). Defence against signature
//! wrapping: each `#id` a reference names must be one element of the document, and the
//! `eb:Messaging` header and Body that are processed must be the ones referenced.

use std::collections::HashMap;

use openssl::pkey::{PKey, Private, Public};
use sha2::{Digest, Sha256};

use super::c14n;
use super::errors::{EbmsError, Refusal};
use super::mime::Part;
use super::ns;
use super::xml::Doc;

/// Our key and certificate, and the partners' pinned signing certificates.
pub struct Keys {
    pub own_key: PKey<Private>,
    /// Our certificate, DER.
    pub own_cert: Vec<u8>,
    pub partners: Vec<Partner>,
}

/// A partner: its party id and the certificate it signs with.
pub struct Partner {
    pub party_id: String,
    /// DER.
    pub cert: Vec<u8>,
    pub key: PKey<Public>,
}

/// The elements of the envelope that are processed: found once, by their place.
#[derive(Debug, Clone, Copy)]
pub struct Envelope {
    pub body: usize,
    pub messaging: usize,
    pub security: usize,
}

/// What the security header established.
#[derive(Debug)]
pub struct Secured {
    /// Each `ds:Reference` of the signature, in exclusive canonical form: copied into the
    /// receipt's non-repudiation information.
    pub references: Vec<Vec<u8>>,
    /// The content of each attachment, decrypted, by `Content-ID`.
    pub attachments: HashMap<String, Vec<u8>>,
}

fn refuse(code: EbmsError, detail: impl Into<String>) -> Refusal {
    Refusal::new(code, detail)
}

/// The envelope's header, body, `eb:Messaging` and `wsse:Security`: each exactly once where it
/// must be (a second `eb:Messaging` or `wsse:Security` is a wrapping attempt, or a message this
/// profile does not take).
pub fn envelope(doc: &Doc) -> Result<Envelope, Refusal> {
    let root = doc.root();
    if !doc.is(root, ns::SOAP12, "Envelope") {
        return Err(refuse(
            EbmsError::InvalidHeader,
            "the root part is not a SOAP 1.2 envelope",
        ));
    }
    let header = doc
        .only_child(root, ns::SOAP12, "Header")
        .ok_or_else(|| refuse(EbmsError::InvalidHeader, "the envelope has no one Header"))?;
    let body = doc
        .only_child(root, ns::SOAP12, "Body")
        .ok_or_else(|| refuse(EbmsError::InvalidHeader, "the envelope has no one Body"))?;
    let messaging = doc
        .only_child(header, ns::EBMS, "Messaging")
        .ok_or_else(|| {
            refuse(
                EbmsError::InvalidHeader,
                "the header has no one eb:Messaging",
            )
        })?;
    let security = doc
        .only_child(header, ns::WSSE, "Security")
        .ok_or_else(|| {
            refuse(
                EbmsError::PolicyNoncompliance,
                "the header has no one wsse:Security: the message is not signed",
            )
        })?;
    Ok(Envelope {
        body,
        messaging,
        security,
    })
}

fn b64(text: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    let compact: String = text.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    base64::engine::general_purpose::STANDARD
        .decode(compact)
        .ok()
}

/// The binary security tokens of the header, by `wsu:Id`: each a certificate, DER.
fn tokens(doc: &Doc, security: usize) -> HashMap<String, Vec<u8>> {
    doc.children_named(security, ns::WSSE, "BinarySecurityToken")
        .filter(|&t| doc.attr(t, "", "ValueType") == Some(ns::X509V3))
        .filter_map(|t| Some((doc.attr(t, ns::WSU, "Id")?.to_string(), b64(&doc.text(t))?)))
        .collect()
}

/// The certificate a `ds:KeyInfo` names through `wsse:SecurityTokenReference/wsse:Reference` to
/// a binary security token.
fn referenced_token<'a>(
    doc: &Doc,
    key_info: usize,
    tokens: &'a HashMap<String, Vec<u8>>,
) -> Option<&'a Vec<u8>> {
    let str_ = doc.only_child(key_info, ns::WSSE, "SecurityTokenReference")?;
    let reference = doc.only_child(str_, ns::WSSE, "Reference")?;
    let uri = doc.attr(reference, "", "URI")?.strip_prefix('#')?;
    tokens.get(uri)
}

/// The one element whose attribute `Id` (in `ns`, or none) is `id`.
fn by_id(doc: &Doc, id_ns: &str, id: &str) -> Result<usize, Refusal> {
    match doc.with_attr(id_ns, "Id", id)[..] {
        [one] => Ok(one),
        [] => Err(refuse(
            EbmsError::FailedAuthentication,
            format!("nothing in the message has the id {id:?} a signature or key names"),
        )),
        _ => Err(refuse(
            EbmsError::FailedAuthentication,
            format!("the id {id:?} stands on more than one element"),
        )),
    }
}

/// Decrypts the attachments the message encrypted for us, by `Content-ID`.
fn decrypt(
    doc: &Doc,
    security: usize,
    tokens: &HashMap<String, Vec<u8>>,
    parts: &[Part],
    keys: &Keys,
) -> Result<HashMap<String, Vec<u8>>, Refusal> {
    let mut out = HashMap::new();
    // One key for every payload, as the profile has it: each more would be one more private-key
    // operation a message could ask for.
    if doc
        .children_named(security, ns::XENC, "EncryptedKey")
        .nth(1)
        .is_some()
    {
        return Err(refuse(
            EbmsError::PolicyNoncompliance,
            "the message has more than one EncryptedKey",
        ));
    }
    for ek in doc.children_named(security, ns::XENC, "EncryptedKey") {
        let method = doc
            .only_child(ek, ns::XENC, "EncryptionMethod")
            .ok_or_else(|| {
                refuse(
                    EbmsError::PolicyNoncompliance,
                    "an EncryptedKey has no EncryptionMethod",
                )
            })?;
        let digest = doc
            .only_child(method, ns::DS, "DigestMethod")
            .and_then(|d| doc.attr(d, "", "Algorithm"));
        let mgf = doc
            .only_child(method, ns::XENC11, "MGF")
            .and_then(|m| doc.attr(m, "", "Algorithm"));
        if doc.attr(method, "", "Algorithm") != Some(ns::RSA_OAEP)
            || digest != Some(ns::SHA256)
            || mgf != Some(ns::MGF1_SHA256)
        {
            return Err(refuse(
                EbmsError::PolicyNoncompliance,
                "the key is not wrapped with RSA-OAEP, SHA-256 and MGF1-SHA256",
            ));
        }
        let for_us = doc
            .only_child(ek, ns::DS, "KeyInfo")
            .and_then(|ki| referenced_token(doc, ki, tokens))
            .is_some_and(|cert| *cert == keys.own_cert);
        if !for_us {
            return Err(refuse(
                EbmsError::FailedDecryption,
                "the payload key is encrypted for another certificate than ours",
            ));
        }
        let wrapped = doc
            .only_child(ek, ns::XENC, "CipherData")
            .and_then(|cd| doc.only_child(cd, ns::XENC, "CipherValue"))
            .and_then(|cv| b64(&doc.text(cv)))
            .ok_or_else(|| {
                refuse(
                    EbmsError::FailedDecryption,
                    "the EncryptedKey has no CipherValue",
                )
            })?;
        let key = unwrap_key(&keys.own_key, &wrapped)?;
        let list = doc
            .only_child(ek, ns::XENC, "ReferenceList")
            .ok_or_else(|| {
                refuse(
                    EbmsError::PolicyNoncompliance,
                    "the EncryptedKey names no data",
                )
            })?;
        for dr in doc.children_named(list, ns::XENC, "DataReference") {
            let id = doc
                .attr(dr, "", "URI")
                .and_then(|u| u.strip_prefix('#'))
                .ok_or_else(|| refuse(EbmsError::FailedDecryption, "a DataReference has no #id"))?;
            let ed = by_id(doc, "", id)?;
            if !doc.is(ed, ns::XENC, "EncryptedData")
                || doc.node(ed).parent != Some(security)
                || doc.attr(ed, "", "Type") != Some(ns::ATTACHMENT_CONTENT_ONLY)
            {
                return Err(refuse(
                    EbmsError::PolicyNoncompliance,
                    "an encrypted reference is not an attachment's content",
                ));
            }
            let algorithm = doc
                .only_child(ed, ns::XENC, "EncryptionMethod")
                .and_then(|m| doc.attr(m, "", "Algorithm"));
            if algorithm != Some(ns::AES128_GCM) {
                return Err(refuse(
                    EbmsError::PolicyNoncompliance,
                    "an attachment is not encrypted with AES-128-GCM",
                ));
            }
            let cid = doc
                .only_child(ed, ns::XENC, "CipherData")
                .and_then(|cd| doc.only_child(cd, ns::XENC, "CipherReference"))
                .and_then(|cr| doc.attr(cr, "", "URI"))
                .and_then(|u| u.strip_prefix("cid:"))
                .map(super::ebms::content_id)
                .ok_or_else(|| {
                    refuse(
                        EbmsError::FailedDecryption,
                        "an EncryptedData names no attachment",
                    )
                })?;
            let cid = cid.as_str();
            let part = parts
                .iter()
                .find(|p| p.content_id.as_deref() == Some(cid))
                .ok_or_else(|| {
                    refuse(
                        EbmsError::FailedDecryption,
                        format!("the encrypted attachment cid:{cid} is not in the message"),
                    )
                })?;
            if out.contains_key(cid) {
                return Err(refuse(
                    EbmsError::PolicyNoncompliance,
                    format!("the attachment cid:{cid} is encrypted twice"),
                ));
            }
            out.insert(cid.to_string(), aes_gcm(&key, &part.body, cid)?);
        }
    }
    Ok(out)
}

/// The payload key: RSA-OAEP (SHA-256, MGF1-SHA256) with our private key; OpenSSL's decryption
/// takes the same time whatever the padding holds.
fn unwrap_key(own: &PKey<Private>, wrapped: &[u8]) -> Result<Vec<u8>, Refusal> {
    let failed = || {
        refuse(
            EbmsError::FailedDecryption,
            "the payload key does not decrypt with our key",
        )
    };
    let mut ctx = openssl::pkey_ctx::PkeyCtx::new(own).map_err(|_| failed())?;
    ctx.decrypt_init().map_err(|_| failed())?;
    ctx.set_rsa_padding(openssl::rsa::Padding::PKCS1_OAEP)
        .map_err(|_| failed())?;
    ctx.set_rsa_oaep_md(openssl::md::Md::sha256())
        .map_err(|_| failed())?;
    ctx.set_rsa_mgf1_md(openssl::md::Md::sha256())
        .map_err(|_| failed())?;
    let mut key = Vec::new();
    ctx.decrypt_to_vec(wrapped, &mut key)
        .map_err(|_| failed())?;
    if key.len() != 16 {
        return Err(failed());
    }
    Ok(key)
}

/// An attachment's content: its bytes are the 12-byte IV, the ciphertext and the 16-byte tag.
fn aes_gcm(key: &[u8], bytes: &[u8], cid: &str) -> Result<Vec<u8>, Refusal> {
    let failed = || {
        refuse(
            EbmsError::FailedDecryption,
            format!("the attachment cid:{cid} does not decrypt (altered, or another key)"),
        )
    };
    if bytes.len() < 12 + 16 {
        return Err(failed());
    }
    let (iv, rest) = bytes.split_at(12);
    let (data, tag) = rest.split_at(rest.len() - 16);
    openssl::symm::decrypt_aead(
        openssl::symm::Cipher::aes_128_gcm(),
        key,
        Some(iv),
        &[],
        data,
        tag,
    )
    .map_err(|_| failed())
}

/// The `PrefixList` of a transform's or canonicalization method's `InclusiveNamespaces`.
fn inclusive_prefixes(doc: &Doc, method: usize) -> Vec<String> {
    doc.only_child(method, ns::EC, "InclusiveNamespaces")
        .and_then(|i| doc.attr(i, "", "PrefixList"))
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

/// Decrypts the attachments, then checks the signature: by `signer`'s pinned certificate, over
/// the `eb:Messaging` header and the Body processed, and over every attachment in
/// `payload_cids`.
pub fn check(
    doc: &Doc,
    env: Envelope,
    parts: &[Part],
    keys: &Keys,
    signer: &Partner,
    payload_cids: &[String],
) -> Result<Secured, Refusal> {
    let tokens = tokens(doc, env.security);
    let signature = doc
        .only_child(env.security, ns::DS, "Signature")
        .ok_or_else(|| refuse(EbmsError::PolicyNoncompliance, "the message is not signed"))?;
    let signed_info = doc
        .only_child(signature, ns::DS, "SignedInfo")
        .ok_or_else(|| {
            refuse(
                EbmsError::FailedAuthentication,
                "the signature has no SignedInfo",
            )
        })?;
    let c14n_method = doc
        .only_child(signed_info, ns::DS, "CanonicalizationMethod")
        .filter(|&m| doc.attr(m, "", "Algorithm") == Some(ns::EXC_C14N))
        .ok_or_else(|| {
            refuse(
                EbmsError::PolicyNoncompliance,
                "SignedInfo is not canonicalized with exclusive C14N",
            )
        })?;
    let method = doc
        .only_child(signed_info, ns::DS, "SignatureMethod")
        .and_then(|m| doc.attr(m, "", "Algorithm"));
    if method != Some(ns::RSA_SHA256) {
        return Err(refuse(
            EbmsError::PolicyNoncompliance,
            "the signature is not RSA-SHA256",
        ));
    }
    let cert = doc
        .only_child(signature, ns::DS, "KeyInfo")
        .and_then(|ki| referenced_token(doc, ki, &tokens))
        .ok_or_else(|| {
            refuse(
                EbmsError::FailedAuthentication,
                "the signature's key is not a certificate in the message",
            )
        })?;
    if *cert != signer.cert {
        return Err(refuse(
            EbmsError::FailedAuthentication,
            format!(
                "the message is signed with a certificate that is not {}'s",
                signer.party_id
            ),
        ));
    }
    let value = doc
        .only_child(signature, ns::DS, "SignatureValue")
        .and_then(|v| b64(&doc.text(v)))
        .ok_or_else(|| {
            refuse(
                EbmsError::FailedAuthentication,
                "the signature has no value",
            )
        })?;
    let canonical = c14n::exclusive(doc, signed_info, &inclusive_prefixes(doc, c14n_method));
    let verified =
        openssl::sign::Verifier::new(openssl::hash::MessageDigest::sha256(), &signer.key)
            .and_then(|mut v| {
                v.update(&canonical)?;
                v.verify(&value)
            })
            .unwrap_or(false);
    if !verified {
        return Err(refuse(
            EbmsError::FailedAuthentication,
            format!(
                "the signature does not verify with {}'s certificate",
                signer.party_id
            ),
        ));
    }
    // Only now, the signature the partner's: the private-key work of decrypting is done for a
    // partner alone, never for whoever can reach the endpoint (our certificate is public, and
    // anyone could wrap keys for it).
    let attachments = decrypt(doc, env.security, &tokens, parts, keys)?;
    let mut covered_messaging = false;
    let mut covered_body = false;
    let mut covered: Vec<String> = Vec::new();
    let mut references = Vec::new();
    for r in doc.children_named(signed_info, ns::DS, "Reference") {
        let uri = doc.attr(r, "", "URI").unwrap_or_default();
        let transforms: Vec<usize> = doc
            .only_child(r, ns::DS, "Transforms")
            .map(|t| doc.children_named(t, ns::DS, "Transform").collect())
            .unwrap_or_default();
        let algorithms: Vec<&str> = transforms
            .iter()
            .filter_map(|&t| doc.attr(t, "", "Algorithm"))
            .collect();
        let digest_method = doc
            .only_child(r, ns::DS, "DigestMethod")
            .and_then(|d| doc.attr(d, "", "Algorithm"));
        if digest_method != Some(ns::SHA256) {
            return Err(refuse(
                EbmsError::PolicyNoncompliance,
                format!("the reference {uri} is not digested with SHA-256"),
            ));
        }
        let want = doc
            .only_child(r, ns::DS, "DigestValue")
            .and_then(|d| b64(&doc.text(d)))
            .ok_or_else(|| {
                refuse(
                    EbmsError::FailedAuthentication,
                    format!("the reference {uri} has no digest"),
                )
            })?;
        let digest = if let Some(id) = uri.strip_prefix('#') {
            if algorithms != [ns::EXC_C14N] {
                return Err(refuse(
                    EbmsError::PolicyNoncompliance,
                    format!("the reference {uri} is not transformed by exclusive C14N alone"),
                ));
            }
            let target = by_id(doc, ns::WSU, id)?;
            covered_messaging |= target == env.messaging;
            covered_body |= target == env.body;
            Sha256::digest(c14n::exclusive(
                doc,
                target,
                &inclusive_prefixes(doc, transforms[0]),
            ))
        } else if let Some(cid) = uri.strip_prefix("cid:").map(super::ebms::content_id) {
            let cid = cid.as_str();
            if algorithms != [ns::ATTACHMENT_CONTENT_SIGNATURE] {
                return Err(refuse(
                    EbmsError::PolicyNoncompliance,
                    format!("the reference {uri} is not an Attachment-Content-Signature-Transform"),
                ));
            }
            let content = match attachments.get(cid) {
                Some(plain) => plain.as_slice(),
                None => parts
                    .iter()
                    .find(|p| p.content_id.as_deref() == Some(cid))
                    .map(|p| p.body.as_slice())
                    .ok_or_else(|| {
                        refuse(
                            EbmsError::FailedAuthentication,
                            format!("the signed attachment {uri} is not in the message"),
                        )
                    })?,
            };
            covered.push(cid.to_string());
            Sha256::digest(content)
        } else {
            return Err(refuse(
                EbmsError::FailedAuthentication,
                format!("the reference {uri:?} is neither #id nor cid:"),
            ));
        };
        if digest[..] != want[..] {
            return Err(refuse(
                EbmsError::FailedAuthentication,
                format!("the digest of {uri} does not match: it was altered"),
            ));
        }
        references.push(c14n::exclusive(doc, r, &[]));
    }
    if !covered_messaging || !covered_body {
        return Err(refuse(
            EbmsError::FailedAuthentication,
            "the signature does not cover the eb:Messaging header and the Body processed",
        ));
    }
    for cid in payload_cids {
        if !covered.contains(cid) {
            return Err(refuse(
                EbmsError::PolicyNoncompliance,
                format!("the payload cid:{cid} is not signed"),
            ));
        }
        if !attachments.contains_key(cid) {
            return Err(refuse(
                EbmsError::PolicyNoncompliance,
                format!("the payload cid:{cid} is not encrypted"),
            ));
        }
    }
    Ok(Secured {
        references,
        attachments,
    })
}
