//! The receiving side against a message of the independent sender (PyPI `as4` 0.2.0, built by
//! `tests/as4/make_fixtures.py`, kept in `tests/fixtures/as4/`): read, decrypted and verified,
//! its interchange the sample it carried; our receipt signed and naming its references; and the
//! same message altered, refused with its ebMS error.

use super::c14n;
use super::config::{self, Config};
use super::errors::EbmsError;
use super::message;
use super::ns;
use super::receipt::{self, Signer};
use super::xml::Doc;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/as4");

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!("{FIXTURES}/{name}")).unwrap()
}

/// The request's Content-Type, from its headers file.
fn content_type() -> String {
    String::from_utf8(fixture("request.headers"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Content-Type: ").map(str::to_string))
        .unwrap()
}

/// The receiver's configuration: its key and certificate, the sender a partner with `cert`.
fn config_with(partner_cert: &str) -> (tempfile::TempDir, Config) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("as4.toml");
    std::fs::write(
        &path,
        format!(
            "[own]\nparty_id = \"PTE000002\"\nkey = \"{FIXTURES}/certs/receiver.key.pem\"\ncert = \"{FIXTURES}/certs/receiver.cert.pem\"\n\n[[partner]]\nparty_id = \"PTE000001\"\ncert = \"{FIXTURES}/certs/{partner_cert}\"\n"
        ),
    )
    .unwrap();
    let config = config::read(&path).unwrap();
    (dir, config)
}

const MAX: usize = 1 << 20;

#[test]
fn the_independent_senders_message_is_read_and_its_interchange_given_back() {
    let (_dir, config) = config_with("sender.cert.pem");
    let got = message::read(&content_type(), &fixture("request.bin"), &config, MAX).unwrap();
    assert_eq!(got.message.from, "PTE000001");
    assert_eq!(got.message.to, "PTE000002");
    assert!(got.message.message_id.ends_with("@as4"));
    let sample = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/samples/valid/orders-d01b-no-una.edi"
    ))
    .unwrap();
    assert_eq!(got.interchanges.len(), 1);
    assert_eq!(got.interchanges[0].1, sample);
    assert_eq!(
        got.references.len(),
        3,
        "Messaging, Body and the attachment"
    );
}

/// Verifies a signal's signature as a sender's MSH does: the references' digests over the
/// canonical form of what they name, and the value over SignedInfo's, by `cert`.
fn verify_signal(body: &[u8], cert_pem: &[u8]) -> Doc {
    use sha2::{Digest, Sha256};
    let doc = Doc::parse(std::str::from_utf8(body).unwrap()).unwrap();
    let si = doc
        .elements()
        .find(|&n| doc.is(n, ns::DS, "SignedInfo"))
        .unwrap();
    for r in doc.children_named(si, ns::DS, "Reference") {
        let id = doc.attr(r, "", "URI").unwrap().strip_prefix('#').unwrap();
        let target = doc.with_attr(ns::WSU, "Id", id);
        assert_eq!(target.len(), 1);
        let digest = Sha256::digest(c14n::exclusive(&doc, target[0], &[]));
        let dv = doc.only_child(r, ns::DS, "DigestValue").unwrap();
        use base64::Engine as _;
        assert_eq!(
            base64::engine::general_purpose::STANDARD.encode(digest),
            doc.text(dv)
        );
    }
    let sv = doc
        .elements()
        .find(|&n| doc.is(n, ns::DS, "SignatureValue"))
        .unwrap();
    use base64::Engine as _;
    let value = base64::engine::general_purpose::STANDARD
        .decode(doc.text(sv))
        .unwrap();
    let cert = openssl::x509::X509::from_pem(cert_pem).unwrap();
    let key = cert.public_key().unwrap();
    let mut v = openssl::sign::Verifier::new(openssl::hash::MessageDigest::sha256(), &key).unwrap();
    v.update(&c14n::exclusive(&doc, si, &[])).unwrap();
    assert!(v.verify(&value).unwrap(), "the signal's signature verifies");
    doc
}

#[test]
fn the_receipt_is_signed_with_our_key_and_names_every_reference() {
    let (_dir, config) = config_with("sender.cert.pem");
    let got = message::read(&content_type(), &fixture("request.bin"), &config, MAX).unwrap();
    let signer = Signer {
        key: &config.keys.own_key,
        cert: &config.keys.own_cert,
    };
    let body = receipt::receipt(&signer, &got.message.message_id, &got.references).unwrap();
    let doc = verify_signal(&body, &fixture("certs/receiver.cert.pem"));
    let refs: Vec<usize> = doc
        .elements()
        .filter(|&n| doc.is(n, ns::DS, "Reference"))
        .filter(|&n| {
            doc.node(n)
                .parent
                .is_some_and(|p| doc.is(p, ns::EBBP, "MessagePartNRInformation"))
        })
        .collect();
    assert_eq!(refs.len(), 3);
    for (r, want) in refs.iter().zip(&got.references) {
        assert_eq!(&c14n::exclusive(&doc, *r, &[]), want, "copied as signed");
    }
    let to = doc
        .elements()
        .find(|&n| doc.is(n, ns::EBMS, "RefToMessageId"))
        .unwrap();
    assert_eq!(doc.text(to), got.message.message_id);
}

#[test]
fn an_error_is_signed_too_and_names_the_message() {
    let (_dir, config) = config_with("sender.cert.pem");
    let signer = Signer {
        key: &config.keys.own_key,
        cert: &config.keys.own_cert,
    };
    let refusal = super::errors::Refusal::new(EbmsError::FailedDecryption, "a <detail> & more");
    let body = receipt::error(&signer, Some("m1@x"), &refusal);
    let doc = verify_signal(&body, &fixture("certs/receiver.cert.pem"));
    let e = doc
        .elements()
        .find(|&n| doc.is(n, ns::EBMS, "Error"))
        .unwrap();
    assert_eq!(doc.attr(e, "", "errorCode"), Some("EBMS:0102"));
    assert_eq!(doc.attr(e, "", "refToMessageInError"), Some("m1@x"));
}

/// The position of `needle` in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len()).position(|w| w == needle).unwrap()
}

#[test]
fn altered_messages_are_refused_with_their_errors() {
    let (_dir, config) = config_with("sender.cert.pem");
    let request = fixture("request.bin");
    let refused = |body: &[u8], config: &Config| {
        message::read(&content_type(), body, config, MAX)
            .unwrap_err()
            .refusal
            .error
    };
    // A byte of the encrypted attachment (its last part is the GCM tag).
    let mut flipped = request.clone();
    let end = flipped.len() - 60;
    flipped[end] ^= 1;
    assert_eq!(refused(&flipped, &config), EbmsError::FailedDecryption);
    // A byte of the signed header: the conversation id's text.
    let mut header = request.clone();
    let at = find(&header, b"<eb3:ConversationId>") + b"<eb3:ConversationId>".len();
    header[at] ^= 1;
    assert_eq!(refused(&header, &config), EbmsError::FailedAuthentication);
    // The sender's certificate is not the one pinned for its party id.
    let (_other_dir, other) = config_with("receiver.cert.pem");
    assert_eq!(refused(&request, &other), EbmsError::FailedAuthentication);
    // A second EncryptedKey (another Id, the same key): one key per message is all the
    // profile sends, and a second would be a second way to the payloads.
    let mut two_keys = request.clone();
    let start = find(&two_keys, b"<enc:EncryptedKey ");
    let end = find(&two_keys, b"</enc:EncryptedKey>") + b"</enc:EncryptedKey>".len();
    let copy = String::from_utf8(two_keys[start..end].to_vec())
        .unwrap()
        .replace("Id=\"EK-", "Id=\"EK2-")
        .into_bytes();
    two_keys.splice(end..end, copy);
    assert_eq!(refused(&two_keys, &config), EbmsError::PolicyNoncompliance);
    // The signature broken and the encrypted key too: the signature is checked first, so the
    // private key is never used on what an unauthenticated party sent.
    let mut both = request.clone();
    let sig = find(&both, b"<ds:SignatureValue>") + b"<ds:SignatureValue>".len();
    both[sig] = if both[sig] == b'A' { b'B' } else { b'A' };
    let key = find(&both, b"<enc:CipherValue>") + b"<enc:CipherValue>".len();
    both[key] = if both[key] == b'A' { b'B' } else { b'A' };
    assert_eq!(refused(&both, &config), EbmsError::FailedAuthentication);
    // Truncated: the body ends inside a part.
    assert_eq!(
        refused(&request[..request.len() / 2], &config),
        EbmsError::InvalidHeader
    );
}
