#!/usr/bin/env python3
"""Judge a signal (receipt or ebMS error) the way the ``as4`` library's sending side does.

Give it the request the sender POSTed and the body that came back; it restores the sender's
exchange (message id and the ds:References it signed, read from the request's SOAP part) and
runs AS4SendingExchange.receive_signal, the library's own code path for an answer:
parse_peppol_receipt(body, expected receiver certificate), RefToMessageId correlation, and for a
receipt verify_non_repudiation.

    check_signal.py --request DIR/request.bin --headers DIR/request.headers \\
                    --signal answer.bin --receiver-cert DIR/certs/receiver.cert.pem [--expect-error EBMS:0004]

Exit status 0 when the signal is accepted as expected (a receipt: ACKNOWLEDGED; with
--expect-error: REJECTED with that error code), 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cryptography import x509

from as4 import ExchangeState, ReceiptVerificationError
from as4.core.common import AS4BaseCredentials, AS4ExternalParty, AS4InternalCredentials, AS4InternalParty
from as4.core.common import AS4LocalPrivateKey, AS4PartyIdentity
from as4.models.dsig.reference import ComparableReferenceFields
from as4.models.soap.envelope import Envelope
from as4.peppol import PeppolAS4Profile, PeppolSendingExchange
from as4.utils.mime_handler import MIMEHandler
from as4.utils.xml_parser import parse_xml
from cryptography.hazmat.primitives.asymmetric import rsa

PEPPOL_AP = "urn:fdc:peppol.eu:2017:identifiers:ap"


def read_headers(path: Path) -> dict[str, str]:
    headers = {}
    for line in path.read_text().splitlines():
        if line.strip():
            key, _, value = line.partition(":")
            headers[key.strip()] = value.strip()
    return headers


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--request", type=Path, required=True, help="the HTTP body that was POSTed")
    parser.add_argument("--headers", type=Path, required=True, help="its headers, one 'Name: value' a line")
    parser.add_argument("--signal", type=Path, required=True, help="the HTTP response body")
    parser.add_argument("--receiver-cert", type=Path, required=True, help="the certificate the sender encrypted to")
    parser.add_argument("--expect-error", metavar="CODE", help="expect an ebMS error signal with this code")
    args = parser.parse_args()

    soap_part, _ = MIMEHandler.parse(
        MIMEHandler.payload_from_request(read_headers(args.headers), args.request.read_bytes())
    )
    sent = Envelope.model_validate_etree(parse_xml(soap_part.get_payload(decode=True)))
    user_message = sent.header.messaging.user_message
    signed_references = [
        ComparableReferenceFields.from_reference(reference)
        for reference in sent.header.security.signature.signed_info.references
    ]
    receiver_cert = x509.load_pem_x509_certificate(args.receiver_cert.read_bytes())

    # Only the certificate of the remote party is consulted; the local key is never used here.
    placeholder_key = AS4LocalPrivateKey(rsa.generate_private_key(public_exponent=65537, key_size=2048))
    exchange = PeppolSendingExchange(
        profile=PeppolAS4Profile,
        local_party=AS4InternalParty(
            identity=AS4PartyIdentity(party_id=user_message.party_info.party_from.party_id.value, party_type=PEPPOL_AP),
            credentials=AS4InternalCredentials(certificate=receiver_cert, private_key=placeholder_key),
        ),
        remote_party=AS4ExternalParty(
            identity=AS4PartyIdentity(party_id=user_message.party_info.party_to.party_id.value, party_type=PEPPOL_AP),
            credentials=AS4BaseCredentials(certificate=receiver_cert),
        ),
        message_id=user_message.message_info.message_id.value,
        messaging_id=sent.header.messaging.messaging_id,
        signed_references=signed_references,
        state=ExchangeState.SENT,
    )
    print(f"message id {exchange.message_id}; signed references {[r.uri for r in signed_references]}")
    try:
        exchange.receive_signal(args.signal.read_bytes())
    except ReceiptVerificationError as exception:
        print(f"REFUSED: ReceiptVerificationError: {exception} (state {exchange.state.value})")
        return 1
    except Exception as exception:  # noqa: BLE001 - the library lets a few others escape
        print(f"REFUSED: {type(exception).__name__}: {exception}")
        return 1

    error = exchange.error
    if error is not None:
        print(f"state {exchange.state.value}: {error.error_code} {error.short_description} "
              f"{error.error_detail.value if error.error_detail else ''!r}")  # fmt: skip
        return 0 if args.expect_error == error.error_code else 1
    print(f"state {exchange.state.value}: receipt acknowledges {[r.uri for r in exchange.receipt.non_repudiated_references]}")
    return 0 if args.expect_error is None and exchange.state is ExchangeState.ACKNOWLEDGED else 1


if __name__ == "__main__":
    sys.exit(main())
