//! The S/MIME of AS2 (RFC 5751, RFC 4130 7): enveloped data decrypted with our key, a detached
//! signature verified against the partner's pinned certificate, compressed data (RFC 3274)
//! inflated within a bound, the MIC the MDN returns, and the MDN's own detached signature with
//! the digest the partner asked for. The CMS structures are OpenSSL's (the `openssl` crate);
//! three calls the crate does not wrap are made through `openssl-sys` here (see [`ffi`]).

use std::io::Read as _;

use openssl::cms::{CMSOptions, CmsContentInfo};
use openssl::hash::MessageDigest;
use openssl::pkey::{PKey, Private};
use openssl::stack::Stack;
use openssl::x509::X509;
use openssl::x509::store::X509StoreBuilder;

/// A digest an AS2 partner names (`micalg`, `signed-receipt-micalg`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Digest {
    Sha1,
    Sha256,
    Sha384,
    Sha512,
}

impl Digest {
    /// Reads a name as RFC 5751 (`sha-256`) or RFC 3851 and the AS2 tools (`sha256`, `sha1`)
    /// write it.
    pub fn parse(name: &str) -> Option<Digest> {
        let n: String = name
            .trim()
            .to_ascii_lowercase()
            .chars()
            .filter(|c| *c != '-')
            .collect();
        match n.as_str() {
            "sha1" => Some(Digest::Sha1),
            "sha256" => Some(Digest::Sha256),
            "sha384" => Some(Digest::Sha384),
            "sha512" => Some(Digest::Sha512),
            _ => None,
        }
    }

    /// The first of a list (`optional, sha-256, sha1`) that is supported.
    pub fn first_of(list: &str) -> Option<Digest> {
        list.split(',').find_map(Digest::parse)
    }

    /// Its `micalg` name (RFC 5751 3.4.3.2).
    pub fn micalg(self) -> &'static str {
        match self {
            Digest::Sha1 => "sha-1",
            Digest::Sha256 => "sha-256",
            Digest::Sha384 => "sha-384",
            Digest::Sha512 => "sha-512",
        }
    }

    /// Its name in `Received-Content-MIC` (RFC 4130 7.3.1 writes `sha1`; the SHA-2 names as
    /// the AS2 tools read them).
    pub fn mic_name(self) -> &'static str {
        match self {
            Digest::Sha1 => "sha1",
            Digest::Sha256 => "sha256",
            Digest::Sha384 => "sha384",
            Digest::Sha512 => "sha512",
        }
    }

    fn md(self) -> MessageDigest {
        match self {
            Digest::Sha1 => MessageDigest::sha1(),
            Digest::Sha256 => MessageDigest::sha256(),
            Digest::Sha384 => MessageDigest::sha384(),
            Digest::Sha512 => MessageDigest::sha512(),
        }
    }

    /// `base64(digest(bytes)), name`: the value of `Received-Content-MIC`.
    pub fn mic(self, bytes: &[u8]) -> String {
        use base64::Engine as _;
        let digest = openssl::hash::hash(self.md(), bytes)
            .map(|d| base64::engine::general_purpose::STANDARD.encode(d))
            .unwrap_or_default();
        format!("{digest}, {}", self.mic_name())
    }
}

/// Why a CMS structure was not opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SmimeError {
    #[error("the enveloped data could not be decrypted with our key: {0}")]
    Decrypt(String),
    #[error("the signature does not verify with the partner's certificate: {0}")]
    Signature(String),
    #[error("the compressed data could not be inflated: {0}")]
    Decompress(String),
    #[error("the compressed data inflates past the {0} bytes --max-inflated leaves it")]
    TooLarge(usize),
}

/// Decrypts enveloped data (DER or BER) with our key and certificate: AES-CBC or 3DES content,
/// RSA PKCS#1 v1.5 or OAEP key transport, as OpenSSL reads them.
pub fn decrypt(der: &[u8], key: &PKey<Private>, cert: &X509) -> Result<Vec<u8>, SmimeError> {
    let cms = CmsContentInfo::from_der(der).map_err(|e| SmimeError::Decrypt(first(&e)))?;
    cms.decrypt(key, cert)
        .map_err(|e| SmimeError::Decrypt(first(&e)))
}

/// Verifies a detached signature (`signature`, DER) over `content` with `partner`'s
/// certificate only: any certificate the signature carries is ignored, and the certificate is
/// pinned, not chained (as AS2 partners exchange them). RSA PKCS#1 v1.5 and PSS.
pub fn verify(signature: &[u8], content: &[u8], partner: &X509) -> Result<(), SmimeError> {
    let fail = |e: openssl::error::ErrorStack| SmimeError::Signature(first(&e));
    let mut cms = CmsContentInfo::from_der(signature).map_err(fail)?;
    let mut certs = Stack::new().map_err(fail)?;
    certs.push(partner.clone()).map_err(fail)?;
    let store = X509StoreBuilder::new().map_err(fail)?.build();
    cms.verify(
        Some(&certs),
        Some(&store),
        Some(content),
        None,
        CMSOptions::BINARY | CMSOptions::NOINTERN | CMSOptions::NO_SIGNER_CERT_VERIFY,
    )
    .map_err(fail)
}

/// Inflates compressed data (RFC 3274: zlib) to at most `max` bytes. OpenSSL reads the
/// structure; Debian's builds it without zlib, so the content is inflated here by flate2.
pub fn decompress(der: &[u8], max: usize) -> Result<Vec<u8>, SmimeError> {
    let compressed = ffi::compressed_content(der).map_err(SmimeError::Decompress)?;
    let mut out = Vec::with_capacity(compressed.len().saturating_mul(4).min(max));
    flate2::read::ZlibDecoder::new(&compressed[..])
        .take((max as u64).saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|e| SmimeError::Decompress(e.to_string()))?;
    if out.len() > max {
        return Err(SmimeError::TooLarge(max));
    }
    Ok(out)
}

/// A detached signature (DER) over `content` with our key, by `digest`, RSA PKCS#1 v1.5, our
/// certificate in it: what an MDN's `application/pkcs7-signature` part holds.
pub fn sign(
    content: &[u8],
    key: &PKey<Private>,
    cert: &X509,
    digest: Digest,
) -> Result<Vec<u8>, String> {
    ffi::sign_detached(content, key, cert, digest.md()).map_err(|e| first(&e))
}

/// The first reason OpenSSL gave, short (never key material).
fn first(e: &openssl::error::ErrorStack) -> String {
    e.errors()
        .first()
        .map(|e| e.reason().unwrap_or("unknown reason").to_string())
        .unwrap_or_else(|| "no reason given".to_string())
}

/// What the `openssl` crate does not wrap: choosing the signer's digest (`CMS_add1_signer`,
/// `CMS_final`) and reaching compressed data's content (`CMS_get0_content`). Each call's
/// pointers are owned by the crate's types for the call's length.
#[allow(unsafe_code)]
mod ffi {
    use std::os::raw::{c_int, c_uint, c_void};

    use foreign_types::ForeignType as _;
    use openssl::cms::CmsContentInfo;
    use openssl::error::ErrorStack;
    use openssl::hash::MessageDigest;
    use openssl::pkey::{PKey, Private};
    use openssl::x509::X509;
    use openssl_sys as sys;

    unsafe extern "C" {
        fn CMS_add1_signer(
            cms: *mut sys::CMS_ContentInfo,
            signer: *mut sys::X509,
            pk: *mut sys::EVP_PKEY,
            md: *const sys::EVP_MD,
            flags: c_uint,
        ) -> *mut c_void;
        fn CMS_final(
            cms: *mut sys::CMS_ContentInfo,
            data: *mut sys::BIO,
            dcont: *mut sys::BIO,
            flags: c_uint,
        ) -> c_int;
        fn CMS_get0_type(cms: *const sys::CMS_ContentInfo) -> *const sys::ASN1_OBJECT;
        fn CMS_get0_content(cms: *mut sys::CMS_ContentInfo) -> *mut *mut sys::ASN1_OCTET_STRING;
        fn OBJ_obj2nid(o: *const sys::ASN1_OBJECT) -> c_int;
        fn ASN1_STRING_length(x: *const sys::ASN1_STRING) -> c_int;
        fn ASN1_STRING_get0_data(x: *const sys::ASN1_STRING) -> *const u8;
    }

    /// id-smime-ct-compressedData (1.2.840.113549.1.9.16.1.9).
    const NID_COMPRESSED_DATA: c_int = 786;

    /// CMS_DETACHED | CMS_BINARY | CMS_PARTIAL | CMS_NOSMIMECAP.
    const FLAGS: c_uint = 0x40 | 0x80 | 0x4000 | 0x200;

    pub fn sign_detached(
        content: &[u8],
        key: &PKey<Private>,
        cert: &X509,
        md: MessageDigest,
    ) -> Result<Vec<u8>, ErrorStack> {
        let len = c_int::try_from(content.len()).map_err(|_| ErrorStack::get())?;
        // SAFETY: every pointer passed is alive for the call (owned by `key`, `cert`, `md`, or
        // the BIO and CMS made here, freed on every path); OpenSSL takes its own references to
        // the signer's certificate and key in CMS_add1_signer.
        unsafe {
            let cms = sys::CMS_sign(
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                FLAGS,
            );
            if cms.is_null() {
                return Err(ErrorStack::get());
            }
            let cms = CmsContentInfo::from_ptr(cms);
            if CMS_add1_signer(
                cms.as_ptr(),
                cert.as_ptr(),
                key.as_ptr(),
                md.as_ptr(),
                FLAGS,
            )
            .is_null()
            {
                return Err(ErrorStack::get());
            }
            let bio = sys::BIO_new_mem_buf(content.as_ptr().cast(), len);
            if bio.is_null() {
                return Err(ErrorStack::get());
            }
            let done = CMS_final(cms.as_ptr(), bio, std::ptr::null_mut(), FLAGS);
            sys::BIO_free_all(bio);
            if done != 1 {
                return Err(ErrorStack::get());
            }
            cms.to_der()
        }
    }

    pub fn compressed_content(der: &[u8]) -> Result<Vec<u8>, String> {
        let cms =
            CmsContentInfo::from_der(der).map_err(|_| "it is not a CMS structure".to_string())?;
        // SAFETY: `cms` is alive for every call; the octet string is owned by it and copied
        // out before it is dropped.
        unsafe {
            if OBJ_obj2nid(CMS_get0_type(cms.as_ptr())) != NID_COMPRESSED_DATA {
                return Err("it is CMS, but not compressed data".into());
            }
            let content = CMS_get0_content(cms.as_ptr());
            if content.is_null() || (*content).is_null() {
                return Err("it holds no content".into());
            }
            let s = (*content).cast::<sys::ASN1_STRING>();
            let n = usize::try_from(ASN1_STRING_length(s)).unwrap_or(0);
            let data = ASN1_STRING_get0_data(s);
            if data.is_null() {
                return Ok(Vec::new());
            }
            Ok(std::slice::from_raw_parts(data, n).to_vec())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_names_are_read_in_either_spelling() {
        assert_eq!(Digest::parse("SHA-256"), Some(Digest::Sha256));
        assert_eq!(Digest::parse("sha1"), Some(Digest::Sha1));
        assert_eq!(Digest::parse("md5"), None);
        assert_eq!(
            Digest::first_of("optional, md5, sha-512"),
            Some(Digest::Sha512)
        );
        assert_eq!(
            Digest::Sha1.mic(b"abc"),
            "qZk+NkcGgWq6PiVxeFDCbJzQ2J0=, sha1"
        );
    }
}
