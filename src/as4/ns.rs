//! The namespaces and algorithm identifiers of AS4's eDelivery and Peppol profile, once.

pub const SOAP12: &str = "http://www.w3.org/2003/05/soap-envelope";
pub const EBMS: &str = "http://docs.oasis-open.org/ebxml-msg/ebms/v3.0/ns/core/200704/";
pub const WSSE: &str =
    "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-secext-1.0.xsd";
pub const WSU: &str =
    "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd";
pub const DS: &str = "http://www.w3.org/2000/09/xmldsig#";
pub const XENC: &str = "http://www.w3.org/2001/04/xmlenc#";
pub const XENC11: &str = "http://www.w3.org/2009/xmlenc11#";
pub const EC: &str = "http://www.w3.org/2001/10/xml-exc-c14n#";
pub const EBBP: &str = "http://docs.oasis-open.org/ebxml-bp/ebbp-signals-2.0";
pub const SBDH: &str = "http://www.unece.org/cefact/namespaces/StandardBusinessDocumentHeader";
pub const PEPPOL_ENVELOPE: &str = "http://peppol.eu/xsd/ticc/envelope/1.0";

pub const X509V3: &str =
    "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-x509-token-profile-1.0#X509v3";
pub const BASE64_BINARY: &str = "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-soap-message-security-1.0#Base64Binary";

/// Exclusive canonicalization, without comments: the only one taken.
pub const EXC_C14N: &str = "http://www.w3.org/2001/10/xml-exc-c14n#";
pub const RSA_SHA256: &str = "http://www.w3.org/2001/04/xmldsig-more#rsa-sha256";
pub const SHA256: &str = "http://www.w3.org/2001/04/xmlenc#sha256";
pub const ATTACHMENT_CONTENT_SIGNATURE: &str = "http://docs.oasis-open.org/wss/oasis-wss-SwAProfile-1.1#Attachment-Content-Signature-Transform";
pub const ATTACHMENT_CONTENT_ONLY: &str =
    "http://docs.oasis-open.org/wss/oasis-wss-SwAProfile-1.1#Attachment-Content-Only";
pub const RSA_OAEP: &str = "http://www.w3.org/2009/xmlenc11#rsa-oaep";
pub const MGF1_SHA256: &str = "http://www.w3.org/2009/xmlenc11#mgf1sha256";
pub const AES128_GCM: &str = "http://www.w3.org/2009/xmlenc11#aes128-gcm";
