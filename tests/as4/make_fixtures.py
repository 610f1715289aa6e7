#!/usr/bin/env python3
"""Generate Peppol AS4 fixtures with the PyPI package ``as4`` (0.2.0, Apache-2.0).

The sending side of the library builds a signed and encrypted Peppol AS4 user message whose
payload is an EDIFACT interchange wrapped in a Peppol envelope ``TextContent`` element inside an
SBDH.  The receiving side of the library parses that request as access point PTE000002 and
answers it with a signed non-repudiation receipt, which the sending side then verifies the way
it would in production.  A few error signals are generated the same way from damaged requests.

Everything is cross-checked without the library too: the MIME body is split by hand, the
attachment decrypted with the receiver's key, the signature references and SignatureValue
recomputed, and (when ``xmlsec1`` is on PATH) the SOAP signatures checked with xmlsec1.

Usage:
    /tmp/as4venv/bin/python make_fixtures.py [--out DIR] [--edi FILE] [--fresh-certs] [--form text|binary]

Certificates and keys are kept in OUT/certs and reused on later runs unless --fresh-certs is
given, so regenerating the messages does not change the PKI.  Message ids, keys for the
session, timestamps and the MIME boundary are random on every run.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import gzip
import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.x509.oid import NameOID
from lxml import etree

from as4 import AS4LocalPrivateKey, ExchangeState, ParticipantNotServicedError
from as4.peppol import (
    PeppolAS4Profile,
    PeppolSendingExchange,
    build_peppol_message,
    create_peppol_external_party,
    create_peppol_internal_party,
    parse_peppol_message,
    parse_peppol_receipt,
    peppol_security_policy,
)

DEFAULT_OUT = Path("/tmp/as4work")
DEFAULT_EDI = Path("/work/main/samples/valid/orders-d01b-no-una.edi")

SENDER_AP = "PTE000001"
RECEIVER_AP = "PTE000002"
SENDER_PARTICIPANT = "0088:5798000000001"
RECEIVER_PARTICIPANT = "0088:5798000000002"
SENDER_COUNTRY = "DK"

# The library only knows the busdox-docid-qns scheme: "<root ns>::<root local name>##<customization>::<version>".
# The SBDH Standard/Type it writes are the root namespace and local name of that identifier, so the
# identifier names the Peppol envelope element actually carried.
ENVELOPE_NS = "http://peppol.eu/xsd/ticc/envelope/1.0"
CUSTOMIZATION = "urn:fdc:example.com:edifact::1.0"
PROCESS = "urn:fdc:example.com:edifact"


def document_type(root_local_name: str) -> str:
    return f"{ENVELOPE_NS}::{root_local_name}##{CUSTOMIZATION}"


NS = {
    "S12": "http://www.w3.org/2003/05/soap-envelope",
    "eb3": "http://docs.oasis-open.org/ebxml-msg/ebms/v3.0/ns/core/200704/",
    "wsse": "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-secext-1.0.xsd",
    "wsu": "http://docs.oasis-open.org/wss/2004/01/oasis-200401-wss-wssecurity-utility-1.0.xsd",
    "ds": "http://www.w3.org/2000/09/xmldsig#",
    "xenc": "http://www.w3.org/2001/04/xmlenc#",
    "ebbp": "http://docs.oasis-open.org/ebxml-bp/ebbp-signals-2.0",
    "sbdh": "http://www.unece.org/cefact/namespaces/StandardBusinessDocumentHeader",
}
WSU_ID = f"{{{NS['wsu']}}}Id"


def log(message: str) -> None:
    print(message, flush=True)


def check(condition: bool, message: str) -> None:
    if not condition:
        raise SystemExit(f"FAILED: {message}")
    log(f"  ok  {message}")


# --------------------------------------------------------------------------------------------- PKI


@dataclass
class Credentials:
    key: rsa.RSAPrivateKey
    cert: x509.Certificate


@dataclass
class Pki:
    root: Credentials
    ap_ca: Credentials
    sender: Credentials
    receiver: Credentials


VALID_FROM = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)
VALID_UNTIL = dt.datetime(2045, 1, 1, tzinfo=dt.timezone.utc)


def name(common_name: str, unit: str | None = None) -> x509.Name:
    attributes = [
        x509.NameAttribute(NameOID.COUNTRY_NAME, "DK"),
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "AS4 Fixture Test PKI"),
    ]
    if unit:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, unit))
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attributes)


def issue(
    subject: x509.Name,
    key: rsa.RSAPrivateKey,
    issuer: Credentials | None,
    ca_path_length: int | None,
    is_ca: bool,
) -> x509.Certificate:
    """Certificates shaped like Peppol's: a root, an AP CA under it, AP leaves under that."""
    signing_key = issuer.key if issuer else key
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer.cert.subject if issuer else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(VALID_FROM)
        .not_valid_after(VALID_UNTIL)
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=ca_path_length), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if issuer:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer.key.public_key()), critical=False
        )
    if is_ca:
        usage = dict(key_cert_sign=True, crl_sign=True, digital_signature=False, key_encipherment=False)
    else:
        usage = dict(key_cert_sign=False, crl_sign=False, digital_signature=True, key_encipherment=True)
    builder = builder.add_extension(
        x509.KeyUsage(
            content_commitment=False,
            data_encipherment=False,
            key_agreement=False,
            encipher_only=False,
            decipher_only=False,
            **usage,
        ),
        critical=True,
    )
    return builder.sign(signing_key, hashes.SHA256())


def new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def write_credentials(directory: Path, stem: str, credentials: Credentials) -> None:
    (directory / f"{stem}.key.pem").write_bytes(
        credentials.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    (directory / f"{stem}.cert.pem").write_bytes(credentials.cert.public_bytes(serialization.Encoding.PEM))


def read_credentials(directory: Path, stem: str) -> Credentials:
    key = serialization.load_pem_private_key((directory / f"{stem}.key.pem").read_bytes(), password=None)
    assert isinstance(key, rsa.RSAPrivateKey)
    cert = x509.load_pem_x509_certificate((directory / f"{stem}.cert.pem").read_bytes())
    return Credentials(key, cert)


PKI_STEMS = ("root-ca", "ap-ca", "sender", "receiver")


def load_or_create_pki(directory: Path, fresh: bool) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    if not fresh and all((directory / f"{stem}.key.pem").exists() for stem in PKI_STEMS):
        log(f"reusing the PKI in {directory}")
        return Pki(*(read_credentials(directory, stem) for stem in PKI_STEMS))

    log(f"creating a PKI in {directory}")
    root_key, ap_key, sender_key, receiver_key = (new_key() for _ in range(4))
    root = Credentials(root_key, issue(name("AS4 Fixture Root CA"), root_key, None, 1, True))
    ap_ca = Credentials(ap_key, issue(name("AS4 Fixture AP CA"), ap_key, root, 0, True))
    sender = Credentials(sender_key, issue(name(SENDER_AP, "FIXTURE AP"), sender_key, ap_ca, None, False))
    receiver = Credentials(receiver_key, issue(name(RECEIVER_AP, "FIXTURE AP"), receiver_key, ap_ca, None, False))
    pki = Pki(root, ap_ca, sender, receiver)
    for stem, credentials in zip(PKI_STEMS, (root, ap_ca, sender, receiver)):
        write_credentials(directory, stem, credentials)
    (directory / "chain.pem").write_bytes(
        ap_ca.cert.public_bytes(serialization.Encoding.PEM) + root.cert.public_bytes(serialization.Encoding.PEM)
    )
    return pki


# ------------------------------------------------------------------------------------- file output


def write_headers(path: Path, headers: dict[str, str]) -> None:
    """One "Name: value" per line, LF terminated."""
    path.write_text("".join(f"{key}: {value}\n" for key, value in headers.items()))


def write_http_request(path: Path, headers: dict[str, str], body: bytes, target: str = "/as4") -> None:
    lines = [f"POST {target} HTTP/1.1", "Host: localhost"]
    lines += [f"{key}: {value}" for key, value in headers.items()]
    lines.append(f"Content-Length: {len(body)}")
    path.write_bytes(("\r\n".join(lines) + "\r\n\r\n").encode("ascii") + body)


def pretty(xml: bytes) -> bytes:
    """For reading only: indentation changes the digests of the signed elements."""
    element = etree.fromstring(xml)
    etree.indent(element, space="  ")
    return etree.tostring(element, pretty_print=True, xml_declaration=True, encoding="UTF-8")


def write_signal(directory: Path, stem: str, headers: dict[str, str], body: bytes) -> None:
    write_headers(directory / f"{stem}.headers", headers)
    (directory / f"{stem}.bin").write_bytes(body)
    (directory / f"{stem}.soap.xml").write_bytes(pretty(body))


# ------------------------------------------------------------------------ independent MIME handling


def split_multipart(headers: dict[str, str], body: bytes) -> list[tuple[dict[str, str], bytes]]:
    """A strict RFC 2046 split on the boundary, independent of the library's email-package parser."""
    content_type = headers["Content-Type"]
    match = re.search(r'boundary="?([^";]+)"?', content_type)
    assert match, content_type
    delimiter = b"--" + match.group(1).encode("ascii")
    assert body.startswith(delimiter + b"\r\n"), "body does not start with the boundary"
    parts = []
    position = len(delimiter) + 2
    while True:
        end = body.index(b"\r\n" + delimiter, position)
        raw = body[position:end]
        head, _, content = raw.partition(b"\r\n\r\n")
        part_headers = {}
        for line in head.decode("ascii").split("\r\n"):
            key, _, value = line.partition(":")
            part_headers[key.strip().lower()] = value.strip()
        parts.append((part_headers, content))
        position = end + 2 + len(delimiter)
        if body[position : position + 2] == b"--":
            break
        assert body[position : position + 2] == b"\r\n"
        position += 2
    return parts


# ------------------------------------------------------------------- independent signature checks


def element_by_id(document: etree._Element, identifier: str) -> etree._Element:
    found = [element for element in document.iter() if identifier in (element.get(WSU_ID), element.get("Id"))]
    assert len(found) == 1, f"{len(found)} elements carry Id {identifier}"
    return found[0]


def exc_c14n(element: etree._Element, prefixes: list[str] | None = None) -> bytes:
    return etree.tostring(element, method="c14n", exclusive=True, with_comments=False, inclusive_ns_prefixes=prefixes)


def verify_soap_signature(
    soap: bytes, signer: x509.Certificate, attachments: dict[str, bytes] | None = None
) -> list[str]:
    """Recompute every ds:Reference and the SignatureValue; returns the URIs checked."""
    document = etree.fromstring(soap)
    signature = document.find("S12:Header/wsse:Security/ds:Signature", NS)
    signed_info = signature.find("ds:SignedInfo", NS)
    checked = []
    for reference in signed_info.findall("ds:Reference", NS):
        uri = reference.get("URI")
        transforms = [t.get("Algorithm") for t in reference.findall("ds:Transforms/ds:Transform", NS)]
        if uri.startswith("cid:"):
            assert transforms == [
                "http://docs.oasis-open.org/wss/oasis-wss-SwAProfile-1.1#Attachment-Content-Signature-Transform"
            ], transforms
            content = (attachments or {})[uri[4:]]
        else:
            assert transforms == ["http://www.w3.org/2001/10/xml-exc-c14n#"], transforms
            content = exc_c14n(element_by_id(document, uri[1:]))
        assert reference.find("ds:DigestMethod", NS).get("Algorithm") == "http://www.w3.org/2001/04/xmlenc#sha256"
        digest = base64.b64encode(hashlib.sha256(content).digest()).decode()
        assert digest == reference.findtext("ds:DigestValue", namespaces=NS).strip(), f"digest of {uri}"
        checked.append(uri)
    signature_value = base64.b64decode(signature.findtext("ds:SignatureValue", namespaces=NS))
    signer.public_key().verify(signature_value, exc_c14n(signed_info), padding.PKCS1v15(), hashes.SHA256())
    return checked


def decrypt_attachment(soap: bytes, attachments: dict[str, bytes], receiver_key: rsa.RSAPrivateKey) -> tuple[str, bytes]:
    """RSA-OAEP(SHA-256, MGF1-SHA-256) for the key, then AES-128-GCM: IV(12) || ciphertext || tag(16)."""
    document = etree.fromstring(soap)
    security = document.find("S12:Header/wsse:Security", NS)
    encrypted_key = security.find("xenc:EncryptedKey", NS)
    session_key = receiver_key.decrypt(
        base64.b64decode(encrypted_key.findtext("xenc:CipherData/xenc:CipherValue", namespaces=NS)),
        padding.OAEP(mgf=padding.MGF1(hashes.SHA256()), algorithm=hashes.SHA256(), label=None),
    )
    assert len(session_key) == 16
    (data_reference,) = encrypted_key.findall("xenc:ReferenceList/xenc:DataReference", NS)
    encrypted_data = element_by_id(document, data_reference.get("URI")[1:])
    cid = encrypted_data.find("xenc:CipherData/xenc:CipherReference", NS).get("URI")[4:]
    blob = attachments[cid]
    return cid, AESGCM(session_key).decrypt(blob[:12], blob[12:], None)


def xmlsec1_verify(soap: bytes, cert_path: Path) -> tuple[bool, str]:
    with tempfile.NamedTemporaryFile(suffix=".xml") as handle:
        handle.write(soap)
        handle.flush()
        command = [
            "xmlsec1", "--verify",
            "--pubkey-cert-pem", str(cert_path),
            "--id-attr:Id", "Messaging",
            "--id-attr:Id", "Body",
            handle.name,
        ]  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True)
    output = (result.stdout + result.stderr).strip()
    return result.returncode == 0, output


# ------------------------------------------------------------------------------------------- main


def envelope_text_content(edi: bytes) -> tuple[bytes, str]:
    """The Peppol envelope element for a text business document, and the charset its text was decoded with.

    TextContent carries characters, not bytes: the interchange is decoded (UTF-8, else ISO-8859-1) and
    lxml escapes <, & and CR (as &#13;) so the text survives XML parsing.  Control characters such as
    the UNOB (level B) separators 0x1C-0x1F cannot appear in XML 1.0 at all: use BinaryContent.
    """
    try:
        charset, text = "utf-8", edi.decode("utf-8")
    except UnicodeDecodeError:
        charset, text = "iso-8859-1", edi.decode("iso-8859-1")
    element = etree.Element(f"{{{ENVELOPE_NS}}}TextContent", nsmap={None: ENVELOPE_NS})
    element.set("mimeType", "application/EDIFACT")
    try:
        element.text = text
    except ValueError as exception:
        raise SystemExit(f"{exception}: this interchange cannot be TextContent, use --form binary") from exception
    return etree.tostring(element, xml_declaration=True, encoding="UTF-8"), charset


def envelope_binary_content(edi: bytes) -> bytes:
    element = etree.Element(f"{{{ENVELOPE_NS}}}BinaryContent", nsmap={None: ENVELOPE_NS})
    element.set("mimeType", "application/EDIFACT")
    element.text = base64.b64encode(edi).decode("ascii")
    return etree.tostring(element, xml_declaration=True, encoding="UTF-8")


def business_content(sbd_bytes: bytes, charset: str = "utf-8") -> tuple[str, str | None, bytes]:
    """What a receiver hands on: the element after the SBDH, decoded back to the original bytes."""
    sbd = etree.fromstring(sbd_bytes)
    children = [child for child in sbd if isinstance(child.tag, str)]
    assert children[0].tag == f"{{{NS['sbdh']}}}StandardBusinessDocumentHeader"
    content = children[1]
    if content.tag == f"{{{ENVELOPE_NS}}}BinaryContent":
        return content.tag, content.get("mimeType"), base64.b64decode(content.text)
    if content.tag == f"{{{ENVELOPE_NS}}}TextContent":
        return content.tag, content.get("mimeType"), (content.text or "").encode(charset)
    return content.tag, None, etree.tostring(content)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--edi", type=Path, default=DEFAULT_EDI)
    parser.add_argument("--fresh-certs", action="store_true", help="replace the PKI in OUT/certs")
    parser.add_argument(
        "--form",
        choices=("text", "binary"),
        default="text",
        help="carry the interchange as envelope TextContent (default) or BinaryContent in request.bin",
    )
    args = parser.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)

    pki = load_or_create_pki(out / "certs", args.fresh_certs)
    sender_party = create_peppol_internal_party(SENDER_AP, pki.sender.cert, AS4LocalPrivateKey(pki.sender.key))
    receiver_party = create_peppol_internal_party(RECEIVER_AP, pki.receiver.cert, AS4LocalPrivateKey(pki.receiver.key))
    receiver_as_seen_by_sender = create_peppol_external_party(RECEIVER_AP, pki.receiver.cert)
    # The receiving side trusts AP certificates chaining to our root via our AP CA, and requires the
    # certificate's CN to equal eb:From/eb:PartyId (what peppol_security_policy enforces).
    receiving_policy = peppol_security_policy(pki.root.cert, intermediates=[pki.ap_ca.cert])

    edi = args.edi.read_bytes()

    def build(payload: bytes, root_local_name: str):
        return build_peppol_message(
            payload,
            local_party=sender_party,
            remote_party=receiver_as_seen_by_sender,
            sender=SENDER_PARTICIPANT,
            recipient=RECEIVER_PARTICIPANT,
            sender_country_id=SENDER_COUNTRY,
            document_type_identifier_scheme="busdox-docid-qns",
            document_type_identifier_value=document_type(root_local_name),
            process_identifier=PROCESS,
        )

    def receive(headers: dict[str, str], body: bytes, accept=None):
        return parse_peppol_message(
            request_headers=headers,
            request_body=body,
            local_party=receiver_party,
            accept_participant=accept,
            security_policy=receiving_policy,
        )

    def sending_exchange(message) -> PeppolSendingExchange:
        """The sender's state after POSTing ``message``, as AS4SendingExchange.build/mark_sent leave it."""
        return PeppolSendingExchange(
            profile=PeppolAS4Profile,
            local_party=sender_party,
            remote_party=receiver_as_seen_by_sender,
            message=message,
            message_id=message.message_id,
            messaging_id=message.messaging_id,
            signed_references=message.signed_references,
            state=ExchangeState.SENT,
        )

    # ------------------------------------------------------------------ the library cannot carry raw bytes
    log("\n== what the payload may be")
    try:
        build(edi, "TextContent")
        log("  raw EDIFACT bytes were accepted (unexpected)")
    except etree.XMLSyntaxError as exception:
        log(f"  raw EDIFACT bytes are refused: lxml XMLSyntaxError: {exception}")

    # ------------------------------------------------------------------------------------ request
    log("\n== request (sender PTE000001 -> receiver PTE000002)")
    if args.form == "text":
        payload, charset = envelope_text_content(edi)
        message = build(payload, "TextContent")
    else:
        payload, charset = envelope_binary_content(edi), "utf-8"
        message = build(payload, "BinaryContent")
    (out / "payload.xml").write_bytes(payload)
    body, boundary = message.get_request_data()
    headers = message.get_http_headers(boundary)
    write_headers(out / "request.headers", headers)
    (out / "request.bin").write_bytes(body)
    write_http_request(out / "request.http", headers, body)
    parts = split_multipart(headers, body)
    check(len(parts) == 2, "request is multipart/related with a SOAP part and one attachment")
    (soap_headers, soap), (attachment_headers, attachment) = parts
    (out / "request.soap.raw.xml").write_bytes(soap)
    (out / "request.soap.xml").write_bytes(pretty(soap))
    cid = attachment_headers["content-id"].strip("<>")
    (out / "request.attachment.enc").write_bytes(attachment)
    log(f"  boundary {boundary}; SOAP part headers {soap_headers}; attachment part headers {attachment_headers}")

    # ------------------------------------------------------------- independent decryption and digests
    log("\n== request, checked without the library")
    decrypted_cid, compressed = decrypt_attachment(soap, {cid: attachment}, pki.receiver.key)
    check(decrypted_cid == cid, f"EncryptedData/CipherReference names the attachment cid:{cid}")
    check(len(attachment) == 12 + len(compressed) + 16, "attachment is IV(12) || AES-128-GCM ciphertext || tag(16)")
    check(compressed[:2] == b"\x1f\x8b", "decrypted attachment is gzip")
    (out / "request.attachment.gz").write_bytes(compressed)
    sbd = gzip.decompress(compressed)
    (out / "request.sbd.xml").write_bytes(sbd)
    check(sbd == message.decrypted_data[cid], "gunzipped attachment is the SBD the sender built")
    checked = verify_soap_signature(soap, pki.sender.cert, {cid: compressed})
    check(len(checked) == 3, f"SignatureValue and digests verify (cid: digest over the gzip bytes): {checked}")
    tag, mime_type, content = business_content(sbd, charset)
    check(content == edi, f"{tag} mimeType={mime_type} carries the EDIFACT interchange byte for byte")

    # ------------------------------------------------------------------------ library receiving side
    log("\n== library receiving side (PTE000002)")
    received = receive(headers, body, accept=lambda participant: None)
    check(received.successful, f"parse_peppol_message: state {received.state.value}, no parse error")
    check(received.message.decrypted_data[cid] == sbd, "decrypted_data[cid] is the decompressed SBD")
    check(
        (received.message.sender, received.message.recipient) == (SENDER_PARTICIPANT, RECEIVER_PARTICIPANT),
        f"SBDH sender {received.message.sender}, receiver {received.message.recipient}",
    )
    check(received.remote_party.identity.party_id == SENDER_AP, "remote party is eb:From PTE000001")
    receipt_headers, receipt_body = received.build_signal()
    write_signal(out, "receipt", receipt_headers, receipt_body)
    log(f"  receipt Content-Type: {receipt_headers['Content-Type']}")

    # ------------------------------------------------------------------------- library sending side
    log("\n== library sending side checks the receipt (PTE000001)")
    receipt = parse_peppol_receipt(receipt_body, pki.receiver.cert)
    check(receipt.success and receipt.error is None, "parse_peppol_receipt: signature by the configured receiver cert")
    check(receipt.original_message_id == message.message_id, f"RefToMessageId is {message.message_id}")
    receipt.verify_non_repudiation(message.signed_references)
    check(True, f"verify_non_repudiation: {[r.uri for r in receipt.non_repudiated_references]}")
    exchange = sending_exchange(message).receive_signal(receipt_body)
    check(exchange.state is ExchangeState.ACKNOWLEDGED, "AS4SendingExchange.receive_signal: acknowledged")
    try:
        parse_peppol_receipt(receipt_body, pki.sender.cert)
        check(False, "a receipt signed by another certificate is refused")
    except Exception as exception:  # noqa: BLE001 - ReceiptVerificationError
        check(type(exception).__name__ == "ReceiptVerificationError", f"wrong expected signer refused: {exception}")
    checked = verify_soap_signature(receipt_body, pki.receiver.cert)
    check(len(checked) == 2, f"receipt SignatureValue and digests verify without the library: {checked}")

    # ------------------------------------------------------------------------------- error signals
    log("\n== error signals from the library's receiving side")
    errors = out / "errors"
    errors.mkdir(exist_ok=True)

    def answer_error(stem: str, request_body: bytes, expected_code: str, accept=None) -> None:
        rejected = receive(headers, request_body, accept=accept)
        check(not rejected.successful, f"{stem}: state {rejected.state.value}")
        signal_headers, signal_body = rejected.build_signal()
        write_signal(errors, stem, signal_headers, signal_body)
        signal = parse_peppol_receipt(signal_body, pki.receiver.cert)
        error = signal.error
        check(
            error is not None and error.error_code == expected_code,
            f"{stem}: {error.error_code} {error.short_description} / {error.error_detail.value!r}",
        )
        sent = sending_exchange(message).receive_signal(signal_body)
        check(sent.state is ExchangeState.REJECTED, f"{stem}: sender's exchange is rejected")

    def not_serviced(participant: str) -> None:
        raise ParticipantNotServicedError(participant)

    answer_error("not-serviced", body, "EBMS:0004", accept=not_serviced)
    tampered_soap = soap.replace(message.conversation_id.encode(), b"as4@00000000-0000-0000-0000-000000000000")
    answer_error("digest-mismatch", body.replace(soap, tampered_soap), "EBMS:0101")
    flipped = bytearray(attachment)
    flipped[40] ^= 0x01
    answer_error("decryption-failed", body.replace(attachment, bytes(flipped)), "EBMS:0102")

    # ------------------------------------------------------------------ BinaryContent variant
    log("\n== variant: the same interchange as Peppol envelope BinaryContent")
    variant = out / "variants" / "binary-content"  # written whatever --form says
    variant.mkdir(parents=True, exist_ok=True)
    binary_message = build(envelope_binary_content(edi), "BinaryContent")
    binary_body, binary_boundary = binary_message.get_request_data()
    binary_headers = binary_message.get_http_headers(binary_boundary)
    write_headers(variant / "request.headers", binary_headers)
    (variant / "request.bin").write_bytes(binary_body)
    binary_received = receive(binary_headers, binary_body)
    check(binary_received.successful, "BinaryContent request is accepted by the receiving side")
    binary_cid = next(iter(binary_received.message.decrypted_data))
    tag, mime_type, content = business_content(binary_received.message.decrypted_data[binary_cid])
    check(content == edi, f"{tag} mimeType={mime_type} carries the interchange byte for byte")
    write_signal(variant, "receipt", *binary_received.build_signal())

    # ---------------------------------------------------------------------------------- xmlsec1
    log("\n== xmlsec1")
    if shutil.which("xmlsec1") is None:
        log("  xmlsec1 is not on PATH; skipped")
    else:
        ok, output = xmlsec1_verify(receipt_body, out / "certs" / "receiver.cert.pem")
        check(ok, f"xmlsec1 verifies the receipt: {output.splitlines()[0] if output else ''}")
        for stem in ("not-serviced", "digest-mismatch", "decryption-failed"):
            ok, output = xmlsec1_verify((errors / f"{stem}.bin").read_bytes(), out / "certs" / "receiver.cert.pem")
            check(ok, f"xmlsec1 verifies errors/{stem}.bin")
        ok, output = xmlsec1_verify(soap, out / "certs" / "sender.cert.pem")
        counts = re.search(r"SignedInfo References \(ok/all\): (\d+)/(\d+)", output)
        check(
            not ok and counts is not None and counts.groups() == ("2", "3"),
            "xmlsec1 on the request's SOAP part: the #Messaging and #Body references verify (2/3), then it "
            "stops at the cid: reference's Attachment-Content-Signature-Transform, which it does not implement, "
            "before checking the SignatureValue",
        )

    log(f"\nfixtures written to {out}")


if __name__ == "__main__":
    sys.exit(main())
