//! What we answer, signed with our key: a receipt (an `eb:SignalMessage` whose `eb:Receipt` holds
//! `ebbp:NonRepudiationInformation`, one `MessagePartNRInformation` per `ds:Reference` of the
//! request's signature, copied in canonical form), or an ebMS error. The signature covers our
//! `eb:Messaging` header and Body (RSA-SHA256, exclusive C14N, SHA-256), its key our certificate
//! as a binary security token: the profile the sender's MSH checks.

use openssl::pkey::{PKey, Private};
use sha2::{Digest, Sha256};

use super::c14n;
use super::errors::Refusal;
use super::ns;
use super::xml::Doc;

/// What signs the answers.
#[derive(Clone, Copy)]
pub struct Signer<'a> {
    pub key: &'a PKey<Private>,
    /// Our certificate, DER.
    pub cert: &'a [u8],
}

/// A fresh id: 128 random bits in hex.
pub fn random_id() -> String {
    let mut bytes = [0u8; 16];
    // The random source of the system: an id that repeats would only be a confusing log line.
    let _ = rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty());
    hex::encode(bytes)
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Escapes text for an XML text node or attribute value.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\r' => out.push_str("&#xD;"),
            c if (c as u32) < 0x20 && !matches!(c, '\t' | '\n') => {}
            c => out.push(c),
        }
    }
    out
}

/// A signed receipt for the message `ref_to`, whose signature had `references` (each a
/// `ds:Reference` in canonical form); the error says why none could be made (references our
/// own reading of the receipt refuses, or OpenSSL failing): never a receipt left unsigned.
pub fn receipt(
    signer: &Signer<'_>,
    ref_to: &str,
    references: &[Vec<u8>],
) -> Result<Vec<u8>, String> {
    let mut nri = format!(
        r#"<eb3:Receipt><ebbp:NonRepudiationInformation xmlns:ebbp="{}">"#,
        ns::EBBP
    );
    for r in references {
        nri.push_str("<ebbp:MessagePartNRInformation>");
        nri.push_str(&String::from_utf8_lossy(r));
        nri.push_str("</ebbp:MessagePartNRInformation>");
    }
    nri.push_str("</ebbp:NonRepudiationInformation></eb3:Receipt>");
    signal(signer, Some(ref_to), &nri).map_err(|(_, why)| why)
}

/// A signed ebMS error for the message `ref_to` (where its id could be read).
pub fn error(signer: &Signer<'_>, ref_to: Option<&str>, refusal: &Refusal) -> Vec<u8> {
    // Only our own escaped text goes in: it signs. Were it not to, the error still goes out,
    // unsigned: the sender learns what was wrong all the same.
    match error_signal(signer, ref_to, refusal) {
        Ok(signed) => signed,
        Err((unsigned, _)) => unsigned,
    }
}

fn error_signal(
    signer: &Signer<'_>,
    ref_to: Option<&str>,
    refusal: &Refusal,
) -> Result<Vec<u8>, (Vec<u8>, String)> {
    let e = refusal.error;
    let ref_attr = ref_to
        .map(|r| format!(r#" refToMessageInError="{}""#, escape(r)))
        .unwrap_or_default();
    let body = format!(
        r#"<eb3:Error category="{}"{ref_attr} errorCode="{}" severity="failure" shortDescription="{}"><eb3:Description xml:lang="en">{}</eb3:Description><eb3:ErrorDetail>{}</eb3:ErrorDetail></eb3:Error>"#,
        e.category(),
        e.code(),
        e.short(),
        escape(&refusal.detail),
        escape(&refusal.detail),
    );
    signal(signer, ref_to, &body)
}

/// The signed envelope of a signal message holding `inner`; where it cannot be signed, the
/// envelope unsigned and why.
fn signal(
    signer: &Signer<'_>,
    ref_to: Option<&str>,
    inner: &str,
) -> Result<Vec<u8>, (Vec<u8>, String)> {
    let id = random_id();
    let timestamp = crate::clock::now();
    let ref_to = ref_to
        .map(|r| format!("<eb3:RefToMessageId>{}</eb3:RefToMessageId>", escape(r)))
        .unwrap_or_default();
    let messaging = format!(
        r#"<eb3:Messaging xmlns:eb3="{eb}" xmlns:wsu="{wsu}" wsu:Id="msg-{id}" S12:mustUnderstand="true"><eb3:SignalMessage><eb3:MessageInfo><eb3:Timestamp>{timestamp}</eb3:Timestamp><eb3:MessageId>{id}@edi-inbox</eb3:MessageId>{ref_to}</eb3:MessageInfo>{inner}</eb3:SignalMessage></eb3:Messaging>"#,
        eb = ns::EBMS,
        wsu = ns::WSU,
    );
    let body = format!(
        r#"<S12:Body xmlns:wsu="{wsu}" wsu:Id="body-{id}"/>"#,
        wsu = ns::WSU
    );
    let document = |signature: &str| {
        format!(
            r#"<S12:Envelope xmlns:S12="{soap}"><S12:Header><wsse:Security xmlns:wsse="{wsse}" S12:mustUnderstand="true"><wsse:BinarySecurityToken xmlns:wsu="{wsu}" EncodingType="{enc}" ValueType="{x509}" wsu:Id="X509-{id}">{cert}</wsse:BinarySecurityToken>{signature}</wsse:Security>{messaging}</S12:Header>{body}</S12:Envelope>"#,
            soap = ns::SOAP12,
            wsse = ns::WSSE,
            wsu = ns::WSU,
            enc = ns::BASE64_BINARY,
            x509 = ns::X509V3,
            cert = b64(signer.cert),
        )
    };
    // The digests of the header and body as they stand in the document (its namespaces in
    // scope), then SignedInfo's canonical form, signed.
    let digest_of = |text: &str, id: &str| {
        let doc = Doc::parse(text).ok()?;
        let n = doc.with_attr(ns::WSU, "Id", id).first().copied()?;
        Some(b64(&Sha256::digest(c14n::exclusive(&doc, n, &[]))))
    };
    let draft = document("");
    let digests =
        digest_of(&draft, &format!("msg-{id}")).zip(digest_of(&draft, &format!("body-{id}")));
    let Some((messaging_digest, body_digest)) = digests else {
        let why = match Doc::parse(&draft) {
            Err(e) => e.to_string(),
            Ok(_) => "its header or body could not be found again".to_string(),
        };
        return Err((draft.into_bytes(), why));
    };
    let reference = |uri: &str, digest: &str| {
        format!(
            r##"<ds:Reference URI="#{uri}"><ds:Transforms><ds:Transform Algorithm="{c14n}"/></ds:Transforms><ds:DigestMethod Algorithm="{sha}"/><ds:DigestValue>{digest}</ds:DigestValue></ds:Reference>"##,
            c14n = ns::EXC_C14N,
            sha = ns::SHA256,
        )
    };
    let signed_info = format!(
        r#"<ds:SignedInfo><ds:CanonicalizationMethod Algorithm="{c14n}"/><ds:SignatureMethod Algorithm="{rsa}"/>{}{}</ds:SignedInfo>"#,
        reference(&format!("msg-{id}"), &messaging_digest),
        reference(&format!("body-{id}"), &body_digest),
        c14n = ns::EXC_C14N,
        rsa = ns::RSA_SHA256,
    );
    let signature = |value: &str| {
        format!(
            r##"<ds:Signature xmlns:ds="{ds}" Id="SIG-{id}">{signed_info}<ds:SignatureValue>{value}</ds:SignatureValue><ds:KeyInfo Id="KI-{id}"><wsse:SecurityTokenReference xmlns:wsu="{wsu}" wsu:Id="STR-{id}"><wsse:Reference URI="#X509-{id}" ValueType="{x509}"/></wsse:SecurityTokenReference></ds:KeyInfo></ds:Signature>"##,
            ds = ns::DS,
            wsu = ns::WSU,
            x509 = ns::X509V3,
        )
    };
    let unsigned = document(&signature(""));
    let value = Doc::parse(&unsigned)
        .map_err(|e| e.to_string())
        .and_then(|doc| {
            let n = doc
                .elements()
                .find(|&n| doc.is(n, ns::DS, "SignedInfo"))
                .ok_or("no SignedInfo")?;
            let canonical = c14n::exclusive(&doc, n, &[]);
            let mut s =
                openssl::sign::Signer::new(openssl::hash::MessageDigest::sha256(), signer.key)
                    .map_err(|e| e.to_string())?;
            s.update(&canonical).map_err(|e| e.to_string())?;
            s.sign_to_vec().map_err(|e| e.to_string())
        });
    let value = match value {
        Ok(sig) => b64(&sig),
        Err(why) => return Err((unsigned.into_bytes(), why)),
    };
    let mut out = String::from(r#"<?xml version="1.0" encoding="UTF-8"?>"#);
    out.push_str(&document(&signature(&value)));
    Ok(out.into_bytes())
}
