#!/usr/bin/env python3
"""The independent AS4 sender of edi-inbox's tests: PyPI ``as4`` 0.2.0's sending MSH (Peppol
profile), which builds a signed, encrypted, compressed user message around each EDIFACT file,
POSTs it to ``edi-inbox receive``, and judges the answer with the library's own sending-side
code (``PeppolSendingExchange.receive_signal``: the receipt's signature by the receiver's
certificate, RefToMessageId, and ``verify_non_repudiation`` of every reference it signed).

    send.py --certs DIR --url URL [--form text|binary|auto] [--times N] [--tamper MODE]
            [--retry-for SECONDS] [--save DIR] [--together] [--message-id ID] [--party ID]
            [--sign-with STEM] FILE...

Each FILE is sent as one message (``--times N``: the same message N times, a sender's retries).
One JSON line per answer on standard output:

    {"file": ..., "message_id": ..., "http": 200, "state": "acknowledged" | "rejected" | "refused"
     | "unanswered", "error_code": ..., "receipt_sha256": ...}

``--together`` sends all FILEs as ONE message with one payload each (see ``build_together``): each
payload its own SBDH around its own Peppol envelope, gzipped, signed (its own
Attachment-Content-Signature-Transform reference) and encrypted (one EncryptedData each, under the
message's one key). Its lines carry ``"file"``: the names joined by ``,``, and ``"files"``: the list.
The receipt must acknowledge every signed reference, each payload's included. The Peppol AS4
profile itself allows one payload a message; this is a test of a receiver's ebMS3 side.

``--url`` may name several receivers (comma-separated): each try goes to the next one.
``--retry-for S``: a message without a receipt (no connection, a 5xx, an unreadable answer) is
sent again, the same bytes, until one comes or S seconds went by: an AS4 sender's retries.
``--tamper MODE`` alters each request before it is sent: flip-attachment, flip-header,
swap-payload, wrap, unknown-cert, truncate. ``--message-id ID`` gives every message that id (a
sender that reuses ids); ``--party ID`` sends as another party, with ``--sign-with STEM``'s key.

DIR holds ``sender.{key,cert}.pem`` and ``receiver.cert.pem`` (PKCS#8 keys; see
``tests/fixtures/as4/certs``). The sender's party id is PTE000001, the receiver's PTE000002.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from lxml import etree

from as4 import AS4LocalPrivateKey, ExchangeState, ReceiptVerificationError
from as4.core.references import AS4References
from as4.peppol import (
    BusdoxDocidQnsDocumentIdentifier,
    PeppolAS4MessageBuilderArgs,
    PeppolAS4Profile,
    PeppolSendingExchange,
    build_peppol_message,
    create_peppol_external_party,
    create_peppol_internal_party,
)

SENDER_AP = "PTE000001"
RECEIVER_AP = "PTE000002"
ENVELOPE_NS = "http://peppol.eu/xsd/ticc/envelope/1.0"
CUSTOMIZATION = "urn:fdc:example.com:edifact::1.0"
PROCESS = "urn:fdc:example.com:edifact"
TOGETHER_SENDER = "0088:5798000000001"
TOGETHER_RECIPIENT = "0088:5798000000002"


def envelope(edi: bytes, form: str) -> tuple[bytes, str]:
    """The Peppol envelope element carrying the interchange: TextContent where it is text XML can
    hold (``auto`` falls back to BinaryContent, as level-B separators must), else BinaryContent."""
    if form in ("text", "auto"):
        try:
            text = edi.decode("utf-8")
        except UnicodeDecodeError:
            text = edi.decode("iso-8859-1")
        element = etree.Element(f"{{{ENVELOPE_NS}}}TextContent", nsmap={None: ENVELOPE_NS})
        element.set("mimeType", "application/EDIFACT")
        try:
            element.text = text
            return etree.tostring(element, xml_declaration=True, encoding="UTF-8"), "TextContent"
        except ValueError:
            if form == "text":
                raise
    element = etree.Element(f"{{{ENVELOPE_NS}}}BinaryContent", nsmap={None: ENVELOPE_NS})
    element.set("mimeType", "application/EDIFACT")
    element.text = base64.b64encode(edi).decode("ascii")
    return etree.tostring(element, xml_declaration=True, encoding="UTF-8"), "BinaryContent"


def build_together(edis: list[bytes], form: str, *, local_party, remote_party):
    """One user message carrying each interchange of EDIS as a payload of its own, built with the
    library's own Peppol builders below ``build_peppol_message`` (whose ``build_message`` takes one
    payload): ``get_standard_business_document`` for each payload's SBDH, then
    ``get_soap_envelope``, whose PartInfo, EncryptedKey ReferenceList, EncryptedData and
    SignedInfo already run over every attachment in ``AS4References``. What ``build_message``
    does for one payload is done here for each: gzip, AES-128-GCM (the 12-byte nonce, then
    ciphertext and tag, as ``CipherHandler`` lays it out), all under one session key, since the
    header has one EncryptedKey for all EncryptedData, that key RSA-OAEP-wrapped for the receiver.

    Each SBDH names its own payload's document type (TextContent or BinaryContent, as
    ``envelope`` chose); eb:CollaborationInfo's Action is the first payload's."""
    import gzip
    import os
    import uuid

    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from as4.core.references import AS4References
    from as4.profiles.peppol.message import PeppolAS4Message
    from as4.utils.xml_parser import parse_xml

    if not edis:
        raise ValueError("no payload to send")
    references = AS4References()
    session_key = AESGCM.generate_key(bit_length=128)
    first_args = None
    compressed: dict[str, bytes] = {}
    encrypted: dict[str, bytes] = {}
    plain: dict[str, bytes] = {}
    for edi in edis:
        payload, root = envelope(edi, form)
        builder_args = PeppolAS4MessageBuilderArgs(
            sender=TOGETHER_SENDER,
            recipient=TOGETHER_RECIPIENT,
            document_type_identifier=BusdoxDocidQnsDocumentIdentifier.from_identifier_value(
                f"{ENVELOPE_NS}::{root}##{CUSTOMIZATION}"
            ),
            document_identification_instance_identifier=str(uuid.uuid4()),
            process_identifier=PROCESS,
            c1_country_id="DK",
        )
        first_args = first_args or builder_args
        sbd = PeppolAS4Message.get_standard_business_document(builder_args, references).dump_to_xml(
            "{http://www.unece.org/cefact/namespaces/StandardBusinessDocumentHeader}StandardBusinessDocument"
        )
        sbd.append(parse_xml(payload))
        document = etree.tostring(sbd)
        attachment_id = f"as4-att-{uuid.uuid4()}@cid"
        references.attachment_id_encrypted_data_id_map[attachment_id] = f"ED-{uuid.uuid4()}"
        plain[attachment_id] = document
        compressed[attachment_id] = gzip.compress(document)
        nonce = os.urandom(12)
        encrypted[attachment_id] = nonce + AESGCM(session_key).encrypt(nonce, compressed[attachment_id], None)
    encrypted_session_key = remote_party.credentials.rsa_public_key.encrypt(
        session_key,
        padding.OAEP(mgf=padding.MGF1(algorithm=hashes.SHA256()), algorithm=hashes.SHA256(), label=b""),
    )
    soap_envelope = PeppolAS4Message.get_soap_envelope(
        local_party,
        remote_party,
        first_args,
        references,
        encrypted_session_key,
        compressed_payloads=compressed,
    )
    return PeppolAS4Message(
        soap_envelope=soap_envelope,
        message_id=references.message_id,
        messaging_id=references.messaging_id,
        mime_attachments=encrypted,
        decrypted_data=plain,
        sender=first_args.sender,
        recipient=first_args.recipient,
        document_type_identifier_value=first_args.document_type_identifier.identifier_value,
        document_type_identifier_scheme=first_args.document_type_identifier.scheme,
        process_identifier=first_args.process_identifier,
    )


def load_key(path: Path):
    return serialization.load_pem_private_key(path.read_bytes(), password=None)


def tamper(mode: str, headers: dict[str, str], body: bytes, other: bytes | None) -> bytes:
    """The request altered as MODE says."""
    if mode == "flip-attachment":
        # A byte of the encrypted attachment, the last part before the closing boundary.
        at = body.rindex(b"\r\n--") - 40
        return body[:at] + bytes([body[at] ^ 1]) + body[at + 1 :]
    if mode == "flip-header":
        marker = b"<eb3:ConversationId>"
        at = body.index(marker) + len(marker)
        return body[:at] + bytes([body[at] ^ 1]) + body[at + 1 :]
    if mode == "truncate":
        return body[: len(body) // 2]
    if mode == "swap-payload":
        # The attachment of another message (encrypted for us as well) in place of this one's.
        mine = attachment_span(body)
        theirs = attachment_span(other)
        return body[: mine[0]] + other[theirs[0] : theirs[1]] + body[mine[1] :]
    if mode == "wrap":
        # Signature wrapping: the signed eb:Messaging kept, hidden inside an unknown header
        # block, and a forged one (another conversation, no wsu:Id) put where it is read.
        start = body.index(b"<eb3:Messaging")
        end = body.index(b"</eb3:Messaging>") + len(b"</eb3:Messaging>")
        signed = body[start:end]
        forged = signed.replace(b"<eb3:ConversationId>", b"<eb3:ConversationId>forged-")
        forged = forged.replace(b' wsu:Id="', b' wsu:Other="', 1)
        hidden = b'<w:Wrapper xmlns:w="urn:attack" xmlns:S12="http://www.w3.org/2003/05/soap-envelope">' + signed + b"</w:Wrapper>"
        return body[:start] + hidden + forged + body[end:]
    raise SystemExit(f"unknown --tamper {mode}")


def attachment_span(body: bytes) -> tuple[int, int]:
    """Where the attachment part's content stands in a two-part body."""
    head = body.index(b"Content-ID:")
    start = body.index(b"\r\n\r\n", head) + 4
    end = body.rindex(b"\r\n--")
    return start, end


def post(url: str, headers: dict[str, str], body: bytes, timeout: float) -> tuple[int | None, bytes]:
    request = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return None, b""


def judge(exchange_for, body: bytes) -> tuple[str, str | None]:
    exchange = exchange_for()
    try:
        exchange.receive_signal(body)
    except (ReceiptVerificationError, Exception) as exception:  # noqa: BLE001
        return f"refused: {type(exception).__name__}: {exception}", None
    if exchange.error is not None:
        return "rejected", exchange.error.error_code
    if exchange.state is ExchangeState.ACKNOWLEDGED:
        return "acknowledged", None
    return f"refused: state {exchange.state.value}", None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--certs", type=Path, required=True)
    parser.add_argument("--url", required=True, help="where to POST; several, comma-separated: each try goes to the next")
    parser.add_argument("--form", choices=("text", "binary", "auto"), default="auto")
    parser.add_argument("--times", type=int, default=1)
    parser.add_argument("--tamper")
    parser.add_argument("--sign-with", type=Path, help="a key and certificate stem to sign with instead (unknown-cert)")
    parser.add_argument("--retry-for", type=float, default=0.0)
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--save", type=Path)
    parser.add_argument("--together", action="store_true", help="all FILEs as one message, one payload each")
    parser.add_argument("--message-id", help="the eb:MessageId of every message (else a fresh one each)")
    parser.add_argument("--party", default=SENDER_AP, help="the sender's party id (eb:From)")
    parser.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args()
    if args.together and args.tamper == "swap-payload":
        parser.error("--tamper swap-payload takes one payload a message, not --together")

    stem = args.sign_with or (args.certs / "sender")
    sender_key = load_key(Path(f"{stem}.key.pem"))
    sender_cert = x509.load_pem_x509_certificate(Path(f"{stem}.cert.pem").read_bytes())
    receiver_cert = x509.load_pem_x509_certificate((args.certs / "receiver.cert.pem").read_bytes())
    local = create_peppol_internal_party(args.party, sender_cert, AS4LocalPrivateKey(sender_key))
    remote = create_peppol_external_party(RECEIVER_AP, receiver_cert)

    def build(edi: bytes):
        payload, root = envelope(edi, args.form)
        return build_peppol_message(
            payload,
            local_party=local,
            remote_party=remote,
            sender="0088:5798000000001",
            recipient="0088:5798000000002",
            sender_country_id="DK",
            document_type_identifier_scheme="busdox-docid-qns",
            document_type_identifier_value=f"{ENVELOPE_NS}::{root}##{CUSTOMIZATION}",
            process_identifier=PROCESS,
            references=AS4References(message_id=args.message_id) if args.message_id else None,
        )

    urls = args.url.split(",")
    tries = 0
    failures = 0
    other_body = None
    units = [[path] for path in args.files] if not args.together else [list(args.files)]
    for paths in units:
        path = paths[0]
        if args.together:
            message = build_together(
                [p.read_bytes() for p in paths], args.form, local_party=local, remote_party=remote
            )
            path = Path("+".join(p.name for p in paths))
        else:
            message = build(path.read_bytes())
        body, boundary = message.get_request_data()
        headers = dict(message.get_http_headers(boundary))
        if args.tamper:
            if args.tamper == "swap-payload" and other_body is None:
                other_body = build(b"UNB+UNOA:2+OTHER+HUB+260101:1200+SWAP'UNH+1+ORDERS:D:96A:UN'UNT+2+1'UNZ+1+SWAP'").get_request_data()[0]
            body = tamper(args.tamper, headers, body, other_body)

        def exchange_for(message=message):
            return PeppolSendingExchange(
                profile=PeppolAS4Profile,
                local_party=local,
                remote_party=remote,
                message=message,
                message_id=message.message_id,
                messaging_id=message.messaging_id,
                signed_references=message.signed_references,
                state=ExchangeState.SENT,
            )

        if args.save:
            args.save.mkdir(parents=True, exist_ok=True)
            (args.save / f"{path.name}.request.bin").write_bytes(body)
            (args.save / f"{path.name}.request.headers").write_text(
                "".join(f"{k}: {v}\n" for k, v in headers.items())
            )
        for n in range(args.times):
            deadline = time.monotonic() + args.retry_for
            while True:
                status, answer = post(urls[tries % len(urls)], headers, body, args.timeout)
                tries += 1
                state, code = judge(exchange_for, answer) if answer else ("unanswered", None)
                receipt_found = state == "acknowledged"
                if receipt_found or time.monotonic() >= deadline or (state == "rejected" and status == 200):
                    break
                time.sleep(0.2)
            if args.save:
                (args.save / f"{path.name}.answer{n}.bin").write_bytes(answer)
            line = {
                "file": path.name if not args.together else ",".join(p.name for p in paths),
                "message_id": message.message_id,
                "http": status,
                "state": state,
                "error_code": code,
                "receipt_sha256": hashlib.sha256(answer).hexdigest() if answer else None,
            }
            if args.together:
                line["files"] = [p.name for p in paths]
            print(json.dumps(line), flush=True)
            failures += 0 if receipt_found else 1
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
